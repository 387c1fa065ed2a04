"""The residual stream: its norm at every layer boundary, what each block writes into it, and how much each
token's vector turns from one layer to the next. Numpy in, plotly out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.heatmap import TICK_LABELS_UP_TO, position_labels
from attention_atlas.viz.tokens import plotly_label, plotly_text


def norms(vectors: np.ndarray) -> np.ndarray:
    """(..., d_model) -> (...) float32 Euclidean norms (accumulated in float64: 2,048 x 576 sums stay exact)."""
    return np.sqrt(np.einsum("...d,...d->...", vectors, vectors, dtype=np.float64)).astype(np.float32)


def cosine_between_layers(stream: np.ndarray) -> np.ndarray:
    """stream: (layers + 1, pos, d_model), the stream before layer 0 and after every layer. -> (layers, pos):
    the cosine similarity of each token's vector before and after each layer (1 = unchanged direction)."""
    before, after = stream[:-1].astype(np.float64), stream[1:].astype(np.float64)
    dot = np.einsum("lpd,lpd->lp", before, after)
    lengths = norms(before).astype(np.float64) * norms(after)
    return (dot / np.maximum(lengths, 1e-12)).astype(np.float32)


def write_share(written: np.ndarray, total: np.ndarray) -> np.ndarray:
    """‖block output‖ / ‖the sum it is part of‖, both (layers, pos): how much of the new stream's length the
    block wrote (0 where the sum is zero)."""
    return np.divide(written, total, out=np.zeros_like(written, dtype=np.float32), where=total > 0)


def layer_token_heatmap(
    values: np.ndarray, row_labels: Sequence[str], tokens: Sequence[str], title: str, value_name: str,
    colorscale: str = "Viridis", zrange: tuple[float, float] | None = None, positions: Sequence[int] | None = None,
) -> go.Figure:
    """values: (rows, tokens), e.g. (layer boundaries, positions); rows top to bottom, one column per position.
    The hover names the row, the position and token, and the value."""
    z = np.asarray(values, dtype=np.float32)
    cols = position_labels(tokens, positions)
    title, value_name = plotly_text(title), plotly_text(value_name)
    heatmap = {"type": "heatmap", "z": z, "x": cols, "y": [plotly_text(r) for r in row_labels],
               "colorscale": colorscale, "colorbar": {"title": {"text": value_name}},
               "hovertemplate": f"%{{y}} · %{{x}}<br>{value_name} %{{z:.4g}}<extra></extra>"}
    if zrange is not None:
        heatmap |= {"zmin": zrange[0], "zmax": zrange[1]}
    xaxis = {"title": {"text": "token"}, "type": "category", "automargin": True}
    if len(cols) <= TICK_LABELS_UP_TO:
        xaxis |= {"tickmode": "array", "tickvals": cols, "ticktext": [plotly_label(t) for t in tokens]}
    return go.Figure({"data": [heatmap], "layout": {
        "title": {"text": title, "x": 0, "xanchor": "left"}, "xaxis": xaxis,
        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "height": max(280, min(1100, 110 + 16 * len(row_labels))), "margin": {"l": 60, "r": 20, "t": 50, "b": 20},
        "hoverlabel": {"font": {"size": 15}},
    }})


def boundary_labels(layers: int, boundaries: Sequence[str] = ("pre", "mid", "post")) -> list[str]:
    """Row names of the stream's norms: 'L0 pre', 'L0 mid', 'L0 post', 'L1 pre', ... (no 'mid' in parallel blocks)."""
    return [f"L{i} {where}" for i in range(layers) for where in boundaries]


def layer_lines(values: np.ndarray, names: Sequence[str], title: str, value_name: str) -> go.Figure:
    """values: (series, layers): one line per series over the layers (e.g. the mean ‖attn_out‖ and ‖mlp_out‖)."""
    x = list(range(values.shape[1]))
    title, value_name, names = plotly_text(title), plotly_text(value_name), [plotly_text(n) for n in names]
    data = [{"type": "scatter", "mode": "lines+markers", "x": x, "y": np.asarray(row, dtype=np.float32),
             "name": name, "hovertemplate": f"{name} · layer %{{x}}<br>{value_name} %{{y:.4g}}<extra></extra>"}
            for name, row in zip(names, values, strict=True)]
    return go.Figure({"data": data, "layout": {
        "title": {"text": title, "x": 0, "xanchor": "left"}, "height": 320,
        "xaxis": {"title": {"text": "layer"}, "dtick": 1}, "yaxis": {"title": {"text": value_name}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40}}})
