"""Download buttons under a figure (plotly or altair): PNG, SVG and HTML files of it, and the data behind it as
CSV; and the label a screen reader reads of the figure, which says where its numbers are."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from attention_atlas.viz.export import FORMATS, available_formats, chart_bytes, figure_bytes
from attention_atlas.viz.figure_text import figure_title
from attention_atlas.viz.tokens import position_label

CSV_SAID = "Its numbers: the CSV download under the figure."
UNNAMED = "Figure"  # the label of a figure with neither a title nor `about` (tests/browser/test_accessibility.py: none)
WHOLE_CSV_UP_TO = 2048  # tokens a side: a matrix's CSV holds it whole up to this (4M cells, about 40 MB)


def figure_label(figure: go.Figure | alt.TopLevelMixin, csv: bool, about: str = "") -> str:
    """What a screen reader reads of a figure (`alt` of st.plotly_chart and st.altair_chart: the ARIA label of a
    role="figure"): its title, or `about` where it has none, and where its numbers are when `csv` (`downloads`
    with a table draws it under the figure)."""
    name = figure_title(figure) or about or UNNAMED
    return f"{name.rstrip('.')}. {CSV_SAID}" if csv else f"{name.rstrip('.')}."


def csv_fits(n_rows: int, n_cols: int) -> bool:
    """Whether a matrix's CSV holds it whole (up to WHOLE_CSV_UP_TO a side)."""
    return max(n_rows, n_cols) <= WHOLE_CSV_UP_TO


def csv_gigabytes(n_rows: int, n_cols: int) -> float:
    """About how large a whole matrix's CSV would be, in GB of text."""
    return n_rows * n_cols * 10 / 1e9


def whole_csv(n_rows: int, n_cols: int, drawn: str = "the window drawn") -> bool:
    """Whether a matrix's CSV can hold it whole; if not, says under the figure that it holds `drawn`."""
    if csv_fits(n_rows, n_cols):
        return True
    st.caption(f"The CSV holds {drawn}: the whole {n_rows:,} × {n_cols:,} matrix would be about "
               f"{csv_gigabytes(n_rows, n_cols):.1f} GB of text.")
    return False


def matrix_table(
    matrix: np.ndarray, row_tokens: Sequence[str], col_tokens: Sequence[str],
    row_positions: Sequence[int] | None = None, col_positions: Sequence[int] | None = None,
) -> pd.DataFrame:
    """(rows, cols) -> a table whose headers name position and token ("#3 o"), so repeated tokens stay apart."""
    rows = range(len(row_tokens)) if row_positions is None else row_positions
    cols = range(len(col_tokens)) if col_positions is None else col_positions
    return pd.DataFrame(np.asarray(matrix, dtype=np.float32),
                        index=[position_label(p, t) for p, t in zip(rows, row_tokens, strict=True)],
                        columns=[position_label(p, t) for p, t in zip(cols, col_tokens, strict=True)])


def file_name(model_id: str, *parts: object) -> str:
    """A download's file name stem: the model (a folder's slashes made safe), then `parts`, dot-separated:
    "toy-date.encoder.attn.1"."""
    return ".".join([model_id.replace("/", "_"), *map(str, parts)])


def constant(table: pd.DataFrame) -> Callable[[], pd.DataFrame]:
    """A table maker for `downloads` that returns a table already made."""
    return lambda: table


def downloads(fig: go.Figure | alt.TopLevelMixin, name: str, key: str,
              table: Callable[[], pd.DataFrame] | None = None) -> None:
    """A row of buttons; files (and the table) are made only when a button is clicked (PNG/SVG take about 0.5 s).

    The session keeps `table` after the run (until its next run, and for minutes after its tab closes), and with
    it the maker's module globals and closure: a page runs in a function, so that no global of its module holds
    the trace (a trace kept so is outside the cache's budget: measured +36 MiB a session at 512 MiniLM tokens,
    1 GB at 2,048 SmolLM2 tokens), and the maker closes over the matrix it writes, not the trace. The same goes
    for a widget's `format_func` or `on_change`."""
    is_chart = isinstance(fig, alt.TopLevelMixin)
    formats, file_bytes = (list(FORMATS), chart_bytes) if is_chart else (available_formats(), figure_bytes)
    with st.container(horizontal=True, key=f"{key}_downloads"):
        for fmt in formats:
            st.download_button(fmt.upper(), data=lambda fmt=fmt: file_bytes(fig, fmt), file_name=f"{name}.{fmt}",
                               mime=FORMATS[fmt], key=f"{key}_{fmt}", on_click="ignore", icon=":material/download:")
        if table is not None:
            st.download_button("CSV", data=lambda: table().to_csv().encode(), file_name=f"{name}.csv",
                               mime="text/csv", key=f"{key}_csv", on_click="ignore", icon=":material/download:")
    if "png" not in formats:
        st.caption("PNG and SVG downloads need Chromium or Chrome installed on the server.")
