"""Download buttons under a figure: PNG, SVG and HTML files of it, and the matrix behind it as CSV."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from viz.export import FORMATS, available_formats, figure_bytes


def downloads(fig: go.Figure, name: str, key: str, table: pd.DataFrame | None = None) -> None:
    """A row of buttons; files are made only when a button is clicked (PNG/SVG take about 0.5 s)."""
    formats = available_formats()
    with st.container(horizontal=True, key=f"{key}_downloads"):
        for fmt in formats:
            st.download_button(fmt.upper(), data=lambda fmt=fmt: figure_bytes(fig, fmt), file_name=f"{name}.{fmt}",
                               mime=FORMATS[fmt], key=f"{key}_{fmt}", on_click="ignore", icon=":material/download:")
        if table is not None:
            st.download_button("CSV", data=lambda: table.to_csv().encode(), file_name=f"{name}.csv", mime="text/csv",
                               key=f"{key}_csv", on_click="ignore", icon=":material/download:")
    if "png" not in formats:
        st.caption("PNG and SVG downloads need Chromium or Chrome installed on the server.")
