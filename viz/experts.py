"""A mixture of experts' routing: which experts each token goes to, with the router's probabilities, and how many
tokens each expert receives in each layer. Numpy in, plotly out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.residual import layer_token_heatmap

RANKS_WRITTEN_UP_TO = 64  # tokens: with more, the chosen experts' ranks are in the hover only


def choice_ranks(indices: np.ndarray, experts: int) -> np.ndarray:
    """indices: (pos, k), each token's chosen experts, the most likely first -> (experts, pos) int: each expert's
    rank in the token's choice (1 = first), 0 where the token did not choose it."""
    ranks = np.zeros((experts, len(indices)), dtype=np.int64)
    for rank, column in enumerate(np.asarray(indices).T, start=1):
        ranks[column, np.arange(len(indices))] = rank
    return ranks


def tokens_per_expert(indices: Sequence[np.ndarray], experts: int) -> np.ndarray:
    """indices: per layer, (pos, k) chosen experts -> (layers, experts) int: how many tokens each expert received."""
    return np.stack([np.bincount(np.asarray(layer).ravel(), minlength=experts) for layer in indices])


def routing_heatmap(probabilities: np.ndarray, indices: np.ndarray, tokens: Sequence[str], title: str) -> go.Figure:
    """probabilities: (pos, experts), the router's softmax; indices: (pos, k), the experts chosen. One row per expert,
    one column per token, coloured by probability; each chosen cell carries its rank (1 = the token's first
    choice), written in it in white when the text is short (the chosen are a token's likeliest: dark cells)."""
    experts = probabilities.shape[1]
    ranks = choice_ranks(indices, experts)  # (experts, pos)
    figure = layer_token_heatmap(probabilities.T, [f"expert {e}" for e in range(experts)], tokens, title,
                                 "probability", "Blues", (0.0, float(max(probabilities.max(), 1e-6))))
    marks = np.where(ranks > 0, ranks.astype(str), "")
    figure.update_traces(customdata=ranks, hovertemplate="%{y} · %{x}<br>probability %{z:.4g}<br>chosen: "
                         "%{customdata} (0: not chosen)<extra></extra>")
    if len(tokens) <= RANKS_WRITTEN_UP_TO:
        figure.update_traces(text=marks, texttemplate="<b>%{text}</b>", textfont={"size": 15, "color": "white"})
    return figure


def expert_load_heatmap(counts: np.ndarray, title: str) -> go.Figure:
    """counts: (layers, experts), the tokens each expert received in each layer."""
    layers, experts = counts.shape
    return go.Figure({"data": [{
        "type": "heatmap", "z": counts, "x": [f"expert {e}" for e in range(experts)],
        "y": [f"layer {i}" for i in range(layers)], "colorscale": "Oranges", "zmin": 0,
        "colorbar": {"title": {"text": "tokens"}}, "text": counts, "texttemplate": "%{text}",
        "hovertemplate": "%{y} · %{x}<br>%{z} tokens<extra></extra>"}], "layout": {
        "title": {"text": title, "x": 0, "xanchor": "left"},
        "xaxis": {"type": "category", "title": {"text": "expert"}},
        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "height": max(260, min(900, 110 + 28 * layers)), "margin": {"l": 60, "r": 20, "t": 50, "b": 40}}})
