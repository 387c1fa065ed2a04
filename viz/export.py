"""Figures as files: plotly's PNG and SVG drawn by kaleido in the system's Chromium, altair's by vl-convert,
and standalone HTML that opens offline.

Kaleido's first image starts a browser (about 6 s here); later ones take about 0.5 s. One server
per process, started on first use and shared by every session behind a lock.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import threading
import warnings

import altair as alt
import plotly.graph_objects as go
import vl_convert

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FORMATS = {"png": "image/png", "svg": "image/svg+xml", "html": "text/html"}
_kaleido_lock = threading.Lock()
_kaleido_started = False


def _start_kaleido() -> None:
    global _kaleido_started
    if not _kaleido_started:
        import kaleido  # imported late: only exports need it

        kaleido.start_sync_server(silence_warnings=True)
        _kaleido_started = True


@functools.cache
def available_formats() -> list[str]:
    """For plotly figures: HTML always; PNG and SVG where kaleido and a Chromium or Chrome are installed (looked
    up once). Altair charts have every format."""
    images = importlib.util.find_spec("kaleido") is not None and any(shutil.which(b) for b in BROWSERS)
    return ["png", "svg", "html"] if images else ["html"]


def figure_bytes(fig: go.Figure, fmt: str) -> bytes:
    """The figure as a `fmt` file ("png", "svg" or "html"). HTML embeds plotly.js, so it opens offline."""
    if fmt == "html":
        return fig.to_html(include_plotlyjs=True, full_html=True).encode()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    height = int(fig.layout.height or 600)
    width = int(fig.layout.width or max(700, 1.25 * height))  # roughly square plots for square matrices
    with _kaleido_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # plotly warns that a running server ignores its options
        _start_kaleido()
        return fig.to_image(format=fmt, width=width, height=height, scale=2 if fmt == "png" else 1)


def chart_bytes(chart: alt.TopLevelMixin, fmt: str) -> bytes:
    """An altair chart as a `fmt` file; the HTML bundles Vega's JavaScript, so it opens offline."""
    spec = chart.to_json()
    if fmt == "html":
        return vl_convert.vegalite_to_html(spec, bundle=True).encode()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return vl_convert.vegalite_to_png(spec, scale=2) if fmt == "png" else vl_convert.vegalite_to_svg(spec).encode()
