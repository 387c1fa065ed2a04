"""One matrix on a page: its heatmap titled with its shape, a note when it is shown cut, and downloads of the
figure and of the whole matrix as CSV (headers that name positions and tokens, or dimensions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.ui.downloads import downloads, figure_label
from attention_atlas.viz.step_through import shape_text, step_heatmap, truncation_note


def show_matrix(
    values: np.ndarray, row_names: Sequence[str], col_names: Sequence[str], name: str,
    axis_names: tuple[str, str], key: str, *, show_values: bool = False, zrange: tuple[float, float] | None = None,
    colorscale: str = "RdBu_r", stem: str = "matrix",
) -> None:
    """values: (rows, cols). name: what it is ("Q = X W_Q"); axis_names: what rows and columns are ("tokens",
    "d_head"), used in the title's shape and on the axes; files are named `<stem>.<key without its page prefix>`."""
    title = f"{name} · {shape_text(values.shape, axis_names)}"
    fig = step_heatmap(values, row_names, col_names, title, axis_titles=axis_names, zrange=zrange,
                       colorscale=colorscale, show_values=show_values)
    st.plotly_chart(fig, key=f"{key}_chart", config={"displaylogo": False}, alt=figure_label(fig, csv=True))
    note = truncation_note(values.shape)
    if note:
        st.caption(note)
    downloads(fig, f"{stem}.{key.split('_', 1)[-1]}", key, table=lambda: whole_table(values, row_names, col_names))


def whole_table(values: np.ndarray, row_names: Sequence[str], col_names: Sequence[str]) -> pd.DataFrame:
    """(rows, cols) -> the whole matrix (never cut) as a table; −∞ (a masked score) stays −∞ ("-inf" in CSV)."""
    return pd.DataFrame(np.asarray(values, dtype=np.float64), index=list(row_names), columns=list(col_names))
