"""A mixture of experts' routing: which experts each token goes to, with the router's scores, and how many
tokens each expert receives in each layer. Numpy in, plotly out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.residual import layer_token_heatmap
from attention_atlas.viz.tokens import plotly_text

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


def routing_heatmap(scores: np.ndarray, indices: np.ndarray, tokens: Sequence[str], title: str,
                    value_name: str) -> go.Figure:
    """scores: (pos, experts), the router's scores named `value_name` (its softmax probabilities, sigmoid scores …);
    indices: (pos, k), the experts chosen. One row per expert, one column per token, coloured by score; each chosen
    cell carries its rank (1 = the token's first choice): in the hover, and marked on the cell when the text is
    short."""
    experts = scores.shape[1]
    ranks = choice_ranks(indices, experts)  # (experts, pos)
    rows = [f"expert {e}" for e in range(experts)]
    low = min(0.0, float(scores.min())) if scores.size else 0.0
    figure = layer_token_heatmap(scores.T, rows, tokens, title, value_name, "Blues",
                                 (low, max(float(scores.max()) if scores.size else 0.0, low + 1e-6)))
    figure.update_traces(customdata=ranks, hovertemplate=f"%{{y}} · %{{x}}<br>{plotly_text(value_name)} "
                         "%{z:.4g}<br>chosen: %{customdata} (0: not chosen)<extra></extra>")
    if len(tokens) <= RANKS_WRITTEN_UP_TO:  # each choice a white disc with its rank: legible on any cell
        expert, position = np.nonzero(ranks)
        columns, rows = list(figure.data[0].x), list(figure.data[0].y)
        figure.add_trace(go.Scatter(
            x=[columns[p] for p in position], y=[rows[e] for e in expert], mode="markers+text",
            text=[str(ranks[e, p]) for e, p in zip(expert, position, strict=True)], textfont={"size": 12},
            marker={"size": 18, "color": "white", "line": {"width": 1, "color": "#333"}}, hoverinfo="skip",
            showlegend=False))
    return figure


def expert_load_heatmap(counts: np.ndarray, layers: Sequence[str], title: str) -> go.Figure:
    """counts: (layers, experts), the tokens each expert received in each of `layers` (their names)."""
    experts = counts.shape[1]
    return go.Figure({"data": [{
        "type": "heatmap", "z": counts, "x": [f"expert {e}" for e in range(experts)],
        "y": [plotly_text(name) for name in layers], "colorscale": "Oranges", "zmin": 0,
        "colorbar": {"title": {"text": "tokens"}}, "text": counts, "texttemplate": "%{text}",
        "hovertemplate": "%{y} · %{x}<br>%{z} tokens<extra></extra>"}], "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
        "xaxis": {"type": "category", "title": {"text": "expert"}},
        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "height": max(260, min(900, 110 + 28 * len(layers))), "margin": {"l": 60, "r": 20, "t": 50, "b": 40}}})
