"""Figures of one head of a long text that a person can read (model/inspect/long_head.py reduces it): the whole matrix
max-pooled into blocks, with a grid of invisible markers a click selects (it opens that region at full resolution);
each query's attention by distance back; and the matrix with its sink columns drawn apart, each part on its own
colour scale. Pure: arrays in, figures out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attention_atlas.viz.heatmap import block_labels, position_labels
from attention_atlas.viz.tokens import plotly_label, plotly_text

ZOOM_GRID = 24  # markers a side over the pooled matrix: a click on one opens the region around it


def pooled_figure(pooled: np.ndarray, row_starts: np.ndarray, col_starts: np.ndarray, title: str,
                  window: tuple[int, int, int, int] | None = None) -> go.Figure:
    """pooled (bq, bk): each block's largest weight; `window` (first row, rows, first column, columns) outlined where
    the page draws it at full resolution. Trace 1: a ZOOM_GRID x ZOOM_GRID grid of markers (customdata: the query row
    and key column at its centre) that a click selects."""
    rows, cols = block_labels(row_starts), block_labels(col_starts)
    r, c = _zoom_blocks(row_starts, col_starts)
    centre = zoom_centres(row_starts, col_starts)
    figure = go.Figure([
        go.Heatmap(z=pooled.astype(np.float32), x=cols, y=rows, colorscale="Viridis", zmin=0.0,
                   colorbar={"title": {"text": "largest weight"}},
                   hovertemplate="queries %{y} → keys %{x}<br>largest weight %{z:.3f}<extra></extra>"),
        go.Scatter(x=[cols[j] for j in c], y=[rows[i] for i in r], mode="markers", showlegend=False,
                   marker={"symbol": "square", "size": 14, "color": "rgba(0,0,0,0)"}, customdata=centre,
                   hovertemplate="click: open query #%{customdata[0]} · key #%{customdata[1]} at full resolution"
                                 "<extra></extra>")])
    if window is not None:
        first_row, n_rows, first_col, n_cols = window
        corners = (_block_of(row_starts, first_row), _block_of(row_starts, first_row + n_rows - 1),
                   _block_of(col_starts, first_col), _block_of(col_starts, first_col + n_cols - 1))
        figure.add_shape(type="rect", x0=corners[2] - 0.5, x1=corners[3] + 0.5, y0=corners[0] - 0.5,
                         y1=corners[1] + 0.5, line={"color": "#e74c3c", "width": 2})
    figure.update_xaxes(title="key positions", type="category", showticklabels=False, showgrid=False, ticks="")
    figure.update_yaxes(title="query positions", type="category", autorange="reversed", showticklabels=False,
                        showgrid=False, ticks="")
    figure.update_layout(title={"text": plotly_text(title), "x": 0, "xanchor": "left"}, height=520,
                         margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return figure


def _zoom_blocks(row_starts: np.ndarray, col_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row and column block of each marker of the zoom grid, (markers,) each, row by row."""
    grid_r = np.unique(np.linspace(0, len(row_starts) - 2, min(ZOOM_GRID, len(row_starts) - 1)).round().astype(int))
    grid_c = np.unique(np.linspace(0, len(col_starts) - 2, min(ZOOM_GRID, len(col_starts) - 1)).round().astype(int))
    return np.repeat(grid_r, len(grid_c)), np.tile(grid_c, len(grid_r))


def zoom_centres(row_starts: np.ndarray, col_starts: np.ndarray) -> np.ndarray:
    """(markers, 2): the query row and key column at the centre of each marker's block, in the markers' order (a
    click reports its marker's index)."""
    r, c = _zoom_blocks(row_starts, col_starts)
    return np.stack([(row_starts[r] + row_starts[r + 1]) // 2, (col_starts[c] + col_starts[c + 1]) // 2], axis=1)


def _block_of(starts: np.ndarray, position: int) -> int:
    """The block of `starts` (blocks + 1,) that holds `position`."""
    return int(np.searchsorted(starts, position, side="right") - 1)


def distance_figure(values: np.ndarray, row_starts: np.ndarray, query_tokens: Sequence[str], title: str) -> go.Figure:
    """values (row blocks, reach + 1): the mean weight a block of queries gives the key d positions back (NaN where
    there is none); rows named by their positions (one token a row: the token too)."""
    single = bool((np.diff(row_starts) == 1).all())
    rows = position_labels([query_tokens[i] for i in row_starts[:-1]], row_starts[:-1]) if single \
        else block_labels(row_starts)
    return go.Figure({"data": [{
        "type": "heatmap", "z": values.astype(np.float32), "x": list(range(values.shape[1])), "y": rows,
        "colorscale": "Viridis", "zmin": 0.0, "hoverongaps": False, "colorbar": {"title": {"text": "weight"}},
        "hovertemplate": "queries %{y}<br>key %{x} back: weight %{z:.3f}<extra></extra>"}],
        "layout": {"title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
                   "xaxis": {"title": {"text": "distance back (0: the query's own token, 1: the one before)"}},
                   "yaxis": {"title": {"text": "query"}, "type": "category", "autorange": "reversed",
                             "showticklabels": len(rows) <= 64, "ticks": "", "showgrid": False, "automargin": True},
                   "height": max(320, min(720, 40 + 14 * len(rows))), "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}})


def sink_apart_figure(sinks: np.ndarray, rest: np.ndarray, rest_range: tuple[float, float] | None,
                      query_tokens: Sequence[str], rows: Sequence[int], key_tokens: Sequence[str],
                      sink_keys: Sequence[int], rest_keys: Sequence[int], title: str, rest_name: str = "weight"
                      ) -> go.Figure:
    """The head's rows drawn in two parts, each on its own colour scale: the sink columns `sinks` (rows, s) in a
    narrow strip on the left (0 to their largest weight), the other columns `rest` (rows, k - s) on the right, over
    `rest_range` (None: their own range; `rest_name`: what the right part's colours are, e.g. "log₁₀ weight")."""
    y = position_labels(query_tokens, rows)
    strip = min(0.3, 0.06 + 0.04 * len(sink_keys))
    figure = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[strip, 1 - strip], horizontal_spacing=0.09,
                           subplot_titles=("sink", "every other key"))
    top = float(np.nanmax(sinks)) if np.isfinite(sinks).any() else 1.0
    figure.add_trace(go.Heatmap(
        z=sinks.astype(np.float32), x=position_labels([key_tokens[k] for k in sink_keys], sink_keys), y=y,
        colorscale="Magma", zmin=0.0, zmax=top or 1.0, hoverongaps=False,
        colorbar={"title": {"text": "sink"}, "x": -0.12, "len": 0.9},
        hovertemplate="%{y} → %{x}<br>weight %{z:.3f}<extra></extra>"), row=1, col=1)
    low, high = rest_range if rest_range is not None else (None, None)
    figure.add_trace(go.Heatmap(
        z=rest.astype(np.float32), x=position_labels([key_tokens[k] for k in rest_keys], rest_keys), y=y,
        colorscale="Viridis", zmin=low, zmax=high, hoverongaps=False,
        colorbar={"title": {"text": plotly_text(rest_name)}},
        hovertemplate="%{y} → %{x}<br>" + plotly_text(rest_name) + " %{z:.3f}<extra></extra>"), row=1, col=2)
    figure.update_xaxes(type="category", tickangle=-45)
    if len(rest_keys) <= 64:
        figure.update_xaxes(tickmode="array", tickvals=position_labels([key_tokens[k] for k in rest_keys], rest_keys),
                            ticktext=[plotly_label(key_tokens[k]) for k in rest_keys], row=1, col=2)
    figure.update_yaxes(type="category", autorange="reversed", showticklabels=len(y) <= 64, row=1, col=1)
    figure.update_layout(title={"text": plotly_text(title), "x": 0, "xanchor": "left"},
                         height=max(320, min(900, 60 + 24 * len(y))), margin={"l": 80, "r": 20, "t": 70, "b": 40})
    return figure
