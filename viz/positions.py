"""Positional encodings drawn: tables and similarities as plotly heatmaps, waves and profiles as altair lines."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.viz.colours import CATEGORICAL
from attention_atlas.viz.heatmap import position_labels
from attention_atlas.viz.tokens import plotly_text

MAX_SIDE = 512  # most rows or columns drawn cell by cell; larger tables are drawn every n-th row / column


def stride(n: int) -> int:
    """Draw every stride-th of n rows so that at most MAX_SIDE are drawn."""
    return -(-n // MAX_SIDE)


def _heatmap(z: np.ndarray, x: np.ndarray | list, y: np.ndarray | list, title: str, axes: tuple[str, str],
             value_name: str, zrange: tuple[float, float], colorscale: str = "RdBu_r", height: int = 420) -> go.Figure:
    title, value_name = plotly_text(title), plotly_text(value_name)
    heatmap = {"type": "heatmap", "z": np.asarray(z, dtype=np.float32), "x": x, "y": y, "colorscale": colorscale,
               "zmin": zrange[0], "zmax": zrange[1], "colorbar": {"title": {"text": value_name}},
               "hovertemplate": f"{axes[0]} %{{y}} · {axes[1]} %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>"}
    layout = {"title": {"text": title, "x": 0, "xanchor": "left"}, "height": height,
              "xaxis": {"title": {"text": axes[1]}}, "yaxis": {"title": {"text": axes[0]}, "autorange": "reversed"},
              "margin": {"l": 60, "r": 20, "t": 50, "b": 40}, "hoverlabel": {"font": {"size": 15}}}
    return go.Figure({"data": [heatmap], "layout": layout})


def symmetric_range(values: np.ndarray) -> tuple[float, float]:
    top = float(np.abs(values).max()) if values.size else 1.0
    return -(top or 1.0), top or 1.0


def table_heatmap(table: np.ndarray, title: str) -> go.Figure:
    """(positions, d_model): position down, dimension across; blue negative, red positive (every n-th drawn
    beyond MAX_SIDE, the axes keeping the true indices)."""
    rs, cs = stride(table.shape[0]), stride(table.shape[1])
    return _heatmap(table[::rs, ::cs], np.arange(0, table.shape[1], cs), np.arange(0, table.shape[0], rs), title,
                    ("position", "dimension"), "value", symmetric_range(table))


def similarity_figure(matrix: np.ndarray, title: str, value_name: str) -> go.Figure:
    """(positions, positions) similarity of position vectors."""
    s = stride(len(matrix))
    ticks = np.arange(0, len(matrix), s)
    return _heatmap(matrix[::s, ::s], ticks, ticks, title, ("position", "position"), value_name,
                    symmetric_range(matrix), height=460)


def bias_heatmap(bias: np.ndarray, title: str) -> go.Figure:
    """(heads, 2 len - 1): a relative-position bias per head, key - query from -(len-1) to len-1."""
    side = (bias.shape[1] - 1) // 2
    return _heatmap(bias, np.arange(-side, side + 1), np.arange(bias.shape[0]), title,
                    ("head", "key − query"), "bias", symmetric_range(bias), height=max(240, 80 + 30 * len(bias)))


def token_heatmap(matrix: np.ndarray, tokens: Sequence[str], title: str, zrange: tuple[float, float],
                  colorbar: bool = True) -> go.Figure:
    """(tokens, d_model): one row per token of the person's text ("#3 cat"), dimensions across; figures drawn
    side by side on one `zrange` may leave out all colour bars but one."""
    cs = stride(matrix.shape[1])
    figure = _heatmap(matrix[:, ::cs], np.arange(0, matrix.shape[1], cs), position_labels(tokens), title,
                      ("token", "dimension"), "value", zrange, height=max(200, min(700, 90 + 22 * len(tokens))))
    return figure.update_traces(showscale=colorbar).update_yaxes(type="category")


def waves_chart(table: np.ndarray, dims: Sequence[int], title: str) -> alt.Chart:
    """Chosen columns of a (positions, d_model) table as lines over positions; click a legend entry to pick one."""
    frame = pd.DataFrame(table[:, list(dims)], columns=[f"dim {d}" for d in dims])
    frame.insert(0, "position", np.arange(len(table)))
    long = frame.melt("position", var_name="dimension", value_name="value")
    pick = alt.selection_point(fields=["dimension"], bind="legend")
    return alt.Chart(long, title=title).mark_line(point=len(table) <= 64).encode(
        x=alt.X("position:Q"), y=alt.Y("value:Q", scale=alt.Scale(domain=[-1.05, 1.05])),
        color=alt.Color("dimension:N", sort=[f"dim {d}" for d in dims], scale=alt.Scale(range=list(CATEGORICAL))),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.12)),
        tooltip=["dimension", "position", alt.Tooltip("value:Q", format=".4f")],
    ).add_params(pick).properties(height=320)


def line_chart(frame: pd.DataFrame, x: str, y: str, title: str, log_y: bool = False) -> alt.Chart:
    """Long-form `frame` with columns x, y and "series": one line per series."""
    scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    return alt.Chart(frame, title=title).mark_line(point=len(frame) <= 130).encode(
        x=alt.X(f"{x}:Q"), y=alt.Y(f"{y}:Q", scale=scale),
        color=alt.Color("series:N", scale=alt.Scale(range=list(CATEGORICAL))),
        tooltip=["series", alt.Tooltip(f"{x}:Q"), alt.Tooltip(f"{y}:Q", format=".4g")],
    ).properties(height=300)
