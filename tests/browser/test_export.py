"""Figures as files: HTML anywhere, PNG and SVG through kaleido and the system Chromium."""

import numpy as np
import pytest

from attention_atlas.viz.export import available_formats, chart_bytes, figure_bytes
from attention_atlas.viz.heatmap import attention_heatmap
from tests.chromium import require_chromium

FIGURE = attention_heatmap(np.eye(3), ["a", "<b>", "c"], ["a", "<b>", "c"], "export")


def test_html_opens_offline_and_unknown_formats_are_refused() -> None:
    page = figure_bytes(FIGURE, "html").decode()
    assert page.startswith("<html>") or page.lower().startswith("<!doctype")
    assert "<script src=" not in page and "&lt;b&gt;" in page  # plotly.js inline; labels escaped
    with pytest.raises(ValueError, match="unknown format 'pdf'"):
        figure_bytes(FIGURE, "pdf")


@pytest.mark.browser
def test_png_and_svg_are_drawn_by_chromium() -> None:
    require_chromium()
    assert available_formats() == ["png", "svg", "html"]
    png, svg = figure_bytes(FIGURE, "png"), figure_bytes(FIGURE, "svg")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 2 * 700  # width: 700 px at scale 2
    assert svg.startswith(b"<svg") and b">&#60;b&#62;</text>" in svg  # the label as text, never markup


def test_altair_charts_download_as_png_svg_and_offline_html() -> None:
    import altair as alt
    import pandas as pd

    chart = alt.Chart(pd.DataFrame({"pos": [0, 1, 2], "value": [0.0, 0.5, 1.0], "dim": ["<b>"] * 3})).mark_line()
    chart = chart.encode(x="pos", y="value", color="dim")
    assert chart_bytes(chart, "png")[:8] == b"\x89PNG\r\n\x1a\n"
    svg = chart_bytes(chart, "svg")
    assert svg.startswith(b"<svg") and b"&lt;b&gt;" in svg  # the legend's label as text, never markup
    page = chart_bytes(chart, "html").decode()
    assert "vegaEmbed" in page and "cdn.jsdelivr" not in page  # Vega bundled: it draws offline
