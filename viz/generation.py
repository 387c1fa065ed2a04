"""Figures of step-by-step generation: a new token's attention rows over its context, and the alternatives the
model weighed. Pure: numpy in, plotly out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.heatmap import TICK_LABELS_UP_TO, position_labels
from attention_atlas.viz.tokens import plotly_label, plotly_text


def rows_heatmap(rows: np.ndarray, row_names: Sequence[str], context: Sequence[str], title: str,
                 key_title: str = "context (key)") -> go.Figure:
    """rows: (n, context) attention weights of one query, one row per layer or head; columns are the context's
    positions ("#3 cat"). Colours from 0 to the largest weight shown, so a weak row still has contrast."""
    z = np.asarray(rows, dtype=np.float32)  # float16 is not a plotly array type
    cols = position_labels(context)
    xaxis = {"title": {"text": plotly_text(key_title)}, "type": "category", "automargin": True}
    if len(cols) <= TICK_LABELS_UP_TO:
        xaxis |= {"tickmode": "array", "tickvals": cols, "ticktext": [plotly_label(t) for t in context]}
    heatmap = {
        "type": "heatmap", "z": z, "x": cols, "y": [plotly_text(n) for n in row_names], "colorscale": "Viridis",
        "zmin": 0.0, "zmax": float(max(z.max(initial=0.0), 1e-6)), "colorbar": {"title": {"text": "weight"}},
        "hovertemplate": "%{y} → %{x}<br>weight %{z:.3f}<extra></extra>",
    }
    layout = {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
        "xaxis": xaxis, "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "height": max(220, min(700, 90 + 22 * len(row_names))), "margin": {"l": 60, "r": 20, "t": 40, "b": 20},
        "hoverlabel": {"font": {"size": 15}},
    }
    return go.Figure({"data": [heatmap], "layout": layout})


def alternatives_bar(tokens: Sequence[str], probs: np.ndarray, chosen: int | None, title: str) -> go.Figure:
    """The most likely next tokens as horizontal bars, most likely on top; `chosen` (an index) in orange."""
    colors = ["#ff7f0e" if i == chosen else "#1f77b4" for i in range(len(tokens))]
    labels = [f"{i + 1}. {plotly_label(t)}" for i, t in enumerate(tokens)]
    bar = {"type": "bar", "orientation": "h", "x": np.asarray(probs, dtype=np.float32), "y": labels,
           "marker": {"color": colors}, "hovertemplate": "%{y}<br>probability %{x:.3f}<extra></extra>"}
    layout = {"title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
              "xaxis": {"title": {"text": "probability"}},
              "yaxis": {"autorange": "reversed", "type": "category", "automargin": True},
              "height": 60 + 24 * len(tokens), "margin": {"l": 60, "r": 20, "t": 40, "b": 20}}
    return go.Figure({"data": [bar], "layout": layout})
