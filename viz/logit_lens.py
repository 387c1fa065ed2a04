"""The logit lens drawn: a layer x position grid of the top token (written in the cell, coloured by its
probability, the top five on hover), and the rank of the model's final prediction at each layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.heatmap import TICK_LABELS_UP_TO, position_labels
from attention_atlas.viz.tokens import plotly_label, plotly_text

Spell = Callable[[list[int]], list[str]]  # token ids -> how they read


def lens_grid(top_ids: np.ndarray, top_probs: np.ndarray, spell: Spell, tokens: Sequence[str],
              positions: Sequence[int], title: str) -> go.Figure:
    """top_ids, top_probs: (layers, positions, k). Rows = layers (0 on top), columns = the positions read."""
    layers, n, k = top_ids.shape
    words = np.array([plotly_label(w) for w in spell(top_ids.reshape(-1).tolist())], dtype=object)
    words = words.reshape(layers, n, k)
    cols = position_labels(tokens, positions)
    hover = [[f"layer {layer} · {col}<br>" + "<br>".join(f"{words[layer, j, r]}  {top_probs[layer, j, r]:.3f}"
                                                       for r in range(k)) for j, col in enumerate(cols)]
             for layer in range(layers)]
    xaxis = {"title": {"text": "position read (its next token is predicted)"}, "type": "category", "side": "top",
             "automargin": True}
    if n <= TICK_LABELS_UP_TO:
        xaxis |= {"tickmode": "array", "tickvals": cols, "ticktext": [plotly_label(t) for t in tokens]}
    return go.Figure({"data": [{
        "type": "heatmap", "z": top_probs[:, :, 0].astype(np.float32), "x": cols, "y": list(range(layers)),
        "text": words[:, :, 0].tolist(), "texttemplate": "%{text}" if n <= TICK_LABELS_UP_TO else None,
        "customdata": hover, "hovertemplate": "%{customdata}<extra></extra>", "colorscale": "Blues",
        "zmin": 0.0, "zmax": 1.0, "colorbar": {"title": {"text": "p(top token)"}}, "textfont": {"size": 14},
    }], "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left", "y": 1, "yref": "container",
                  "yanchor": "top", "pad": {"t": 10}}, "xaxis": xaxis,
        "yaxis": {"title": {"text": "layer"}, "autorange": "reversed", "dtick": 1 if layers <= 32 else None},
        "height": max(300, min(1100, 140 + 26 * layers)), "margin": {"l": 60, "r": 20, "t": 90, "b": 20},
        "hoverlabel": {"font": {"size": 14}},
    }})


def rank_lines(ranks: np.ndarray, probs: np.ndarray, names: Sequence[str], title: str) -> go.Figure:
    """ranks, probs: (layers, lines), one line per position chosen: the rank of the model's final prediction at
    every layer (log axis, 1 at the top) with its probability on hover."""
    layers = list(range(ranks.shape[0]))
    worst = max(2, int(ranks.max()) if ranks.size else 2)
    names = [plotly_text(name) for name in names]
    data = [{"type": "scatter", "mode": "lines+markers", "x": layers, "y": ranks[:, i].astype(np.int64),
             "customdata": probs[:, i].astype(np.float32), "name": name,
             "hovertemplate": f"{name} · layer %{{x}}<br>rank %{{y}} · p %{{customdata:.3f}}<extra></extra>"}
            for i, name in enumerate(names)]
    return go.Figure({"data": data, "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"}, "height": 340,
        "xaxis": {"title": {"text": "layer"}, "dtick": 1 if len(layers) <= 32 else None},
        "yaxis": {"title": {"text": "rank of the final prediction"}, "type": "log",
                  "range": [np.log10(worst * 1.5), np.log10(0.8)]},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40}}})
