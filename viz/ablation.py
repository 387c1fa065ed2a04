"""Figures of head ablation: the change each head's ablation makes (a layer x head grid), and a change per position."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text


def scan_heatmap(effects: np.ndarray, title: str, measure: str, layer_names: Sequence[str] | None = None
                 ) -> go.Figure:
    """effects (layers, heads): the change the ablation of each head alone made, darker = more. `layer_names` names
    each row ("layer 3 (attention layer 1)" in a hybrid; default: "layer 0", "layer 1", ...)."""
    layers, heads = effects.shape
    title, measure = plotly_text(title), plotly_text(measure)
    names = [plotly_text(n) for n in layer_names] if layer_names is not None else [f"layer {i}" for i in range(layers)]
    fig = go.Figure(go.Heatmap(
        z=effects.astype(np.float64), x=list(range(heads)), y=names, colorscale="Reds", zmin=0,
        colorbar={"title": {"text": measure, "side": "right"}},
        hovertemplate="%{y} · head %{x}<br>" + measure + ": %{z:.4g}<extra></extra>",
    ))
    fig.update_xaxes(title="head", dtick=1 if heads <= 16 else None)
    fig.update_yaxes(title="layer", type="category", autorange="reversed", automargin=True)
    fig.update_layout(title=title, height=min(700, 160 + 22 * layers), margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


def change_bars(tokens: Sequence[str], values: np.ndarray, title: str, measure: str) -> go.Figure:
    """One bar a position: `values` (positions,) of `measure`, labelled by the token at each position."""
    labels = [f"{i}: {plotly_label(t)}" for i, t in enumerate(tokens)]
    title, measure = plotly_text(title), plotly_text(measure)
    fig = go.Figure(go.Bar(x=labels, y=np.asarray(values, dtype=np.float64),
                           hovertemplate="%{x}<br>" + measure + ": %{y:.4g}<extra></extra>"))
    fig.update_xaxes(title="position: the token read there")
    fig.update_yaxes(title=measure)
    fig.update_layout(title=title, height=340, margin={"l": 60, "r": 20, "t": 50, "b": 80})
    return fig
