"""Figures of one head's computation step by step: any matrix as a heatmap titled with its shape.

Rows and columns are named by the caller (tokens as "#3 cat", dimensions as "d7"); a matrix larger than
LIMIT on a side shows its first LIMIT rows and columns, and `truncation_note` says so (the page offers the
whole matrix as CSV). Values are coloured on a diverging scale centred at 0 (weights, activations and
scores have both signs); masked cells (−∞) are hatched grey as everywhere (viz/masked.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.masked import LEGEND_ABOVE, hatch_image, legend_entry
from attention_atlas.viz.tokens import plotly_text

LIMIT = 48  # rows and columns drawn at most: a 48 x 48 grid of cells is still readable on a projector
VALUES_UP_TO = 16  # numbers are written in the cells up to this many rows and columns


def shape_text(shape: Sequence[int], names: Sequence[str]) -> str:
    """(7, 64) and ("tokens", "d_head") -> "(tokens, d_head) = (7, 64)"."""
    return f"({', '.join(names)}) = ({', '.join(str(n) for n in shape)})"


def truncation_note(shape: Sequence[int], limit: int = LIMIT) -> str | None:
    """What a person must know when a matrix is shown cut, or None when it is shown whole."""
    cut = [f"the first {limit} of {count} {what}" for count, what in zip(shape, ("rows", "columns"), strict=True)
           if count > limit]
    return f"Showing {' and '.join(cut)}; the CSV download has the whole matrix." if cut else None


def symmetric_range(values: np.ndarray) -> tuple[float, float]:
    """(−m, m) with m the largest finite |value| (1 when there is none), so that 0 is the scale's middle."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 1.0
    return -max(top, 1e-12), max(top, 1e-12)


def step_heatmap(
    values: np.ndarray,
    row_names: Sequence[str],
    col_names: Sequence[str],
    title: str,
    *,
    axis_titles: tuple[str, str] = ("token", "dimension"),
    zrange: tuple[float, float] | None = None,
    colorscale: str = "RdBu_r",
    show_values: bool = False,
    limit: int = LIMIT,
) -> go.Figure:
    """values: (rows, cols), possibly with −∞ (masked: hatched grey) and shown at most `limit` on each side.
    Hover names the row, the column and the value; names are plain text (escaped here)."""
    shown = np.asarray(values, dtype=np.float64)[:limit, :limit]
    masked = np.isneginf(shown)
    z = np.where(masked, np.nan, shown).astype(np.float32)
    rows = [plotly_text(name) for name in row_names[:limit]]
    cols = [plotly_text(name) for name in col_names[:limit]]
    low, high = zrange or symmetric_range(shown)
    heatmap = {"type": "heatmap", "z": z, "x": cols, "y": rows, "colorscale": colorscale, "zmin": low, "zmax": high,
               "hoverongaps": False, "hovertemplate": "%{y} · %{x}<br>value %{z:.4g}<extra></extra>",
               "colorbar": {"thickness": 12}}
    if show_values and max(z.shape) <= VALUES_UP_TO:
        heatmap["texttemplate"] = "%{z:.2f}"
    layout = {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": {"title": {"text": plotly_text(axis_titles[1])}, "type": "category", "automargin": True},
        "yaxis": {"title": {"text": plotly_text(axis_titles[0])}, "type": "category", "autorange": "reversed",
                  "automargin": True},
        "height": max(260, min(760, 110 + 20 * len(rows))), "margin": {"l": 60, "r": 20, "t": 60, "b": 20},
        "hoverlabel": {"font": {"size": 15}},
    }
    data = [heatmap]
    if masked.any():
        data.append(legend_entry())
        layout |= {"images": [hatch_image()], "legend": LEGEND_ABOVE, "plot_bgcolor": "rgba(0,0,0,0)"}
    return go.Figure({"data": data, "layout": layout})


def dimension_names(count: int, prefix: str = "d") -> list[str]:
    """["d0", "d1", ...]: column names of a vector's components."""
    return [f"{prefix}{i}" for i in range(count)]
