"""Download buttons under an altair chart: its HTML (PNG and SVG where vl-convert is installed) and its data."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import altair as alt
import pandas as pd
import streamlit as st

MIME = {"png": "image/png", "svg": "image/svg+xml", "html": "text/html"}


def chart_formats() -> list[str]:
    """HTML always (it loads Vega from a CDN to draw); PNG and SVG with the vl-convert-python package."""
    return ["png", "svg", "html"] if importlib.util.find_spec("vl_convert") else ["html"]


def chart_bytes(chart: alt.Chart, fmt: str) -> bytes:
    if fmt == "html":
        return chart.to_html().encode()
    import vl_convert  # only where chart_formats offers it

    spec = chart.to_json()
    return vl_convert.vegalite_to_png(spec, scale=2) if fmt == "png" else vl_convert.vegalite_to_svg(spec).encode()


def chart_downloads(chart: alt.Chart, name: str, key: str, table: Callable[[], pd.DataFrame] | None = None) -> None:
    """A row of buttons; the files are made only when a button is clicked."""
    with st.container(horizontal=True, key=f"{key}_downloads"):
        for fmt in chart_formats():
            st.download_button(fmt.upper(), data=lambda fmt=fmt: chart_bytes(chart, fmt), file_name=f"{name}.{fmt}",
                               mime=MIME[fmt], key=f"{key}_{fmt}", on_click="ignore", icon=":material/download:")
        if table is not None:
            st.download_button("CSV", data=lambda: table().to_csv().encode(), file_name=f"{name}.csv",
                               mime="text/csv", key=f"{key}_csv", on_click="ignore", icon=":material/download:")
