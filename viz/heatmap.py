"""Token-by-token matrices (attention, similarity) as plotly heatmaps.

The axes are categorical, one category per position ("#3 cat"), so repeated tokens stay separate
cells and the hover can name both tokens without a (q x k) array of hover strings: the payload
is the matrix plus two label lists, which keeps one head usable at 2048 tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.masked import LEGEND_ABOVE, hatch_image
from attention_atlas.viz.masked import legend_entry as masked_legend_entry
from attention_atlas.viz.tokens import plotly_label, plotly_text, position_label

TICK_LABELS_UP_TO = 64  # beyond this many tokens plotly thins the axis labels itself
WINDOW = 512  # the most rows and columns a page should draw cell by cell (2048 x 2048 is 25 MB and 15 s)
SMALL_WINDOW = 128  # the most a head drawn small (the Overview's, 400 px) shows: ~3 px a cell, so a diagonal shows
VALUES_UP_TO = 40  # "show values" writes numbers in cells only up to this many rows and columns
COLOR_SCALES = ["Viridis", "Blues", "Magma", "Cividis", "Greys"]


def position_labels(tokens: Sequence[str], positions: Sequence[int] | None = None) -> list[str]:
    """Unique axis categories: "#<position> <token>", escaped for plotly (`plotly_text`)."""
    positions = range(len(tokens)) if positions is None else positions
    return [plotly_text(position_label(p, t)) for p, t in zip(positions, tokens, strict=True)]


def _axis(title: str, categories: list[str], tokens: Sequence[str], **extra: Any) -> dict[str, Any]:
    """A categorical axis; short token labels on the ticks when they fit, plotly's own thinning otherwise."""
    axis = {"title": {"text": plotly_text(title)}, "type": "category", "showgrid": False,  # no lines over hatched cells
            **extra}
    if len(categories) <= TICK_LABELS_UP_TO:
        axis |= {"tickmode": "array", "tickvals": categories, "ticktext": [plotly_label(t) for t in tokens]}
    return axis


def matrix_heatmap(
    values: np.ndarray,
    row_tokens: Sequence[str],
    col_tokens: Sequence[str],
    title: str = "",
    *,
    row_positions: Sequence[int] | None = None,
    col_positions: Sequence[int] | None = None,
    zrange: tuple[float, float] = (0.0, 1.0),
    colorscale: str = "Viridis",
    show_values: bool = False,
    value_name: str = "weight",
    axis_titles: tuple[str, str] = ("query", "key"),
    masked: np.ndarray | None = None,
    height: int | None = None,
    categories: tuple[list[str], list[str]] | None = None,
) -> go.Figure:
    """values: (rows, cols), rows top to bottom. Positions default to 0..n-1 (pass them when rows or
    columns were left out). The hover reads "#i row → #j col" and the value; `show_values` writes the
    values in the cells when the matrix is at most VALUES_UP_TO on each side. masked: (rows, cols) bool,
    True where a mask hid the key from the query: drawn hatched grey, with a legend entry (viz/masked.py).
    height: pixels (default: grows with the number of tokens). categories: the rows' and columns' axis
    categories, where they are not tokens (blocks of positions, `block_labels`)."""
    rows, cols = ([[plotly_text(c) for c in axis] for axis in categories] if categories else
                  (position_labels(row_tokens, row_positions), position_labels(col_tokens, col_positions)))
    z = np.asarray(values, dtype=np.float32)  # float16 is not a plotly array type
    any_masked = masked is not None and bool(masked.any())
    if any_masked:
        z = np.where(masked, np.float32(np.nan), z)  # empty cells: the hatched image shows through
    write_values = show_values and max(z.shape) <= VALUES_UP_TO
    value_name = plotly_text(value_name)
    heatmap = {
        "type": "heatmap", "z": z, "x": cols, "y": rows, "colorscale": colorscale, "zmin": zrange[0],
        "zmax": zrange[1], "colorbar": {"title": {"text": value_name}}, "hoverongaps": False,
        "hovertemplate": f"%{{y}} → %{{x}}<br>{value_name} %{{z:.3f}}<extra></extra>",
    }
    if write_values:
        heatmap["texttemplate"] = "%{z:.2f}"
    side = height or max(320, min(900, 40 + 28 * max(len(rows), len(cols))))
    layout = {
        # the title alone above the plot; the key axis below it, its margin growing with its tick labels
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left", "y": 1, "yref": "container",
                  "yanchor": "top", "pad": {"t": 10}, "automargin": True},
        "xaxis": _axis(axis_titles[1], cols, col_tokens, side="bottom", automargin=True),
        "yaxis": _axis(axis_titles[0], rows, row_tokens, autorange="reversed", automargin=True),
        "height": side, "margin": {"l": 60, "r": 20, "t": 60 if any_masked else 40, "b": 20},
        "hoverlabel": {"font": {"size": 15}},  # readable from the back of a room
    }
    data = [heatmap]
    if any_masked:
        data.append(masked_legend_entry())
        layout |= {"images": [hatch_image()], "legend": LEGEND_ABOVE, "plot_bgcolor": "rgba(0,0,0,0)"}
    return go.Figure({"data": data, "layout": layout})  # one dict, validated once: faster than update_* calls


def block_labels(starts: Sequence[int]) -> list[str]:
    """Axis categories of blocks of positions: starts (blocks + 1,) -> "#0–#15", "#16–#31", ..."""
    return [f"#{a}–#{b - 1}" if b - a > 1 else f"#{a}" for a, b in itertools.pairwise(starts)]


def attention_heatmap(
    weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str = "", **options: Any
) -> go.Figure:
    """weights: (q_len, k_len) probabilities; rows are queries, columns keys. Options as `matrix_heatmap`."""
    return matrix_heatmap(weights, query_tokens, key_tokens, title, **options)


def similarity_heatmap(similarity: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """(len, len) cosine similarities of token vectors, from -1 (opposite) to 1 (same direction)."""
    return matrix_heatmap(similarity, tokens, tokens, title, zrange=(-1.0, 1.0), colorscale="RdBu_r",
                          value_name="cosine", axis_titles=("token", "token"))


def layer_head_heatmap(values: np.ndarray, value_name: str, title: str = "", colorscale: str = "Viridis") -> go.Figure:
    """values: (layers, heads), one number per head (e.g. its entropy); layer 0 on top, colours over the range."""
    z = np.asarray(values, dtype=np.float32)
    finite = z[np.isfinite(z)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    value_name = plotly_text(value_name)
    return go.Figure({
        "data": [{"type": "heatmap", "z": z, "colorscale": colorscale, "zmin": low, "zmax": max(high, low + 1e-6),
                  "colorbar": {"title": {"text": value_name}},
                  "hovertemplate": f"layer %{{y}} · head %{{x}}<br>{value_name} %{{z:.3f}}<extra></extra>"}],
        "layout": {
            "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
            "xaxis": {"title": {"text": "head"}, "side": "top", "dtick": 1},
            "yaxis": {"title": {"text": "layer"}, "autorange": "reversed", "dtick": 1},
            "height": max(260, min(900, 120 + 24 * z.shape[0])), "margin": {"l": 60, "r": 20, "t": 80, "b": 20},
        },
    })


def sink_bars(shares: np.ndarray, query_tokens: Sequence[str], positions: Sequence[int], title: str = "") -> go.Figure:
    """shares: (rows,) the part of each query row's attention a head's learned sink took (GPT-OSS: one more key,
    not a token; the row's weights on the tokens sum to 1 less it), as horizontal bars named "sink", rows top to
    bottom as the heatmap draws them."""
    rows = position_labels(query_tokens, positions)
    x = np.asarray(shares, dtype=np.float32)
    return go.Figure({
        "data": [{"type": "bar", "orientation": "h", "name": "sink", "x": x, "y": rows, "showlegend": False,
                  "hovertemplate": "%{y} → sink<br>weight %{x:.3f}<extra></extra>"}],
        "layout": {
            "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
            "xaxis": {"title": {"text": "weight on the sink"}, "range": [0.0, 1.0]},
            "yaxis": _axis("query", rows, query_tokens, autorange="reversed", automargin=True),
            "height": max(320, min(900, 40 + 28 * len(rows))), "margin": {"l": 60, "r": 20, "t": 40, "b": 20},
        },  # no legend: the axis names the sink, and one beside the title would sit under the chart's buttons
    })
