"""Download buttons under an altair chart: PNG, SVG and HTML (drawn offline by vl-convert) and its data."""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd
import streamlit as st
import vl_convert

MIME = {"png": "image/png", "svg": "image/svg+xml", "html": "text/html"}


def chart_bytes(chart: alt.Chart, fmt: str) -> bytes:
    """The chart as a file: the HTML bundles Vega's JavaScript, so it opens without a network."""
    spec = chart.to_json()
    if fmt == "html":
        return vl_convert.vegalite_to_html(spec, bundle=True).encode()
    return vl_convert.vegalite_to_png(spec, scale=2) if fmt == "png" else vl_convert.vegalite_to_svg(spec).encode()


def chart_downloads(chart: alt.Chart, name: str, key: str, table: Callable[[], pd.DataFrame] | None = None) -> None:
    """A row of buttons; the files are made only when a button is clicked."""
    with st.container(horizontal=True, key=f"{key}_downloads"):
        for fmt in MIME:
            st.download_button(fmt.upper(), data=lambda fmt=fmt: chart_bytes(chart, fmt), file_name=f"{name}.{fmt}",
                               mime=MIME[fmt], key=f"{key}_{fmt}", on_click="ignore", icon=":material/download:")
        if table is not None:
            st.download_button("CSV", data=lambda: table().to_csv().encode(), file_name=f"{name}.csv",
                               mime="text/csv", key=f"{key}_csv", on_click="ignore", icon=":material/download:")
