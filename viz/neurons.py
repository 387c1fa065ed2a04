"""FFN neurons of one layer: the most active neurons per token, a token x neuron heatmap, and one neuron's
activation over the text, drawn as the tokens themselves coloured by it. Numpy in, plotly/pandas out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text, position_label

TOKENS_PER_LINE = 16  # the coloured text wraps after this many tokens


def top_neurons_per_token(hidden: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """hidden: (pos, d_ff) -> the k most active neurons of each token (pos, k) and their activations (pos, k),
    largest first."""
    k = min(k, hidden.shape[1])
    top = np.argpartition(-hidden, k - 1, axis=1)[:, :k]  # (pos, k), unordered
    values = np.take_along_axis(hidden, top, axis=1)
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(values, order, axis=1)


def top_table(tokens: Sequence[str], neurons: np.ndarray, values: np.ndarray,
              positions: Sequence[int] | None = None) -> pd.DataFrame:
    """(pos, k) neurons and activations -> a table: one row per token, 'n123 (4.21)' cells."""
    positions = range(len(tokens)) if positions is None else positions
    cells = [[f"n{n} ({v:.2f})" for n, v in zip(row_n, row_v, strict=True)] for row_n, row_v in
             zip(neurons, values, strict=True)]
    return pd.DataFrame(cells, index=[position_label(p, t) for p, t in zip(positions, tokens, strict=True)],
                        columns=[f"top {i + 1}" for i in range(neurons.shape[1])])


def most_active(hidden: np.ndarray, count: int) -> np.ndarray:
    """The `count` neurons with the largest activation on any token, strongest first: (count,) indices."""
    peak = hidden.max(axis=0)  # (d_ff,)
    return np.argsort(-peak, kind="stable")[:min(count, hidden.shape[1])]


def coloured_text(tokens: Sequence[str], activation: np.ndarray, title: str, start: int = 0) -> go.Figure:
    """The tokens laid out as text, TOKENS_PER_LINE a line, each cell coloured by `activation` (pos,) on a
    scale centred on 0. Token strings are plotly-escaped text, never HTML."""
    n = len(tokens)
    lines = -(-n // TOKENS_PER_LINE)
    z = np.full((lines, TOKENS_PER_LINE), np.nan, dtype=np.float32)
    text = np.full((lines, TOKENS_PER_LINE), "", dtype=object)
    hover = np.full((lines, TOKENS_PER_LINE), "", dtype=object)
    for i, (token, value) in enumerate(zip(tokens, activation, strict=True)):
        row, col = divmod(i, TOKENS_PER_LINE)
        z[row, col], text[row, col] = value, plotly_label(token)
        hover[row, col] = f"#{start + i} {plotly_label(token)}: {value:.4g}"
    top = float(np.nanmax(np.abs(z))) if n else 1.0
    return go.Figure({"data": [{
        "type": "heatmap", "z": z, "text": text.tolist(), "texttemplate": "%{text}", "textfont": {"size": 15},
        "customdata": hover.tolist(),
        "hovertemplate": "%{customdata}<extra></extra>", "colorscale": "RdBu_r", "zmin": -top or -1, "zmax": top or 1,
        "colorbar": {"title": {"text": "activation"}}, "xgap": 2, "ygap": 2, "hoverongaps": False,
    }], "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
        "xaxis": {"visible": False}, "yaxis": {"visible": False, "autorange": "reversed"},
        "height": max(160, 90 + 34 * lines), "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "plot_bgcolor": "rgba(0,0,0,0)",
    }})
