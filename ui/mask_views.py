"""What the Masks page's tabs share: a matrix drawn at most DRAWN x DRAWN with its downloads, and a site's mask with
what hides each cell (their figures: attention_atlas/plot/masking.py, which notebooks draw through too)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.chunks import chunk_words
from attention_atlas.plot.masking import DRAWN, SiteMask, corner_figure, first_self_site
from attention_atlas.ui.downloads import csv_fits, csv_gigabytes, downloads, figure_label, file_name, matrix_table


def name(trace: Trace, *parts: object) -> str:
    """A file name stem: model, then the parts."""
    return file_name(trace.facts.model_id, *parts)


def heatmap(matrix: np.ndarray, trace: Trace, site: str, title: str, key: str, file: str, **options) -> None:
    """A (q_len, k_len) matrix of `trace` at `site`, its first DRAWN rows and columns, with its downloads: the CSV
    holds the whole matrix where it fits (`csv_fits`), else the corner drawn."""
    show_corner(corner_figure(matrix, trace, site, title, **options), matrix, trace, site, key, file)


def show_corner(figure: go.Figure, matrix: np.ndarray, trace: Trace, site: str, key: str, file: str) -> None:
    """A figure of the corner of `matrix` (`corner_figure`), with its downloads."""
    queries, keys = trace.query_tokens(site), trace.key_tokens(site)
    n_q, n_k = min(len(queries), DRAWN), min(len(keys), DRAWN)
    st.plotly_chart(figure, key=key, alt=figure_label(figure, csv=True))
    whole = csv_fits(len(queries), len(keys))
    if max(len(queries), len(keys)) > max(n_q, n_k):
        st.caption(f"Drawn: the first {n_q} × {n_k} of {len(queries):,} × {len(keys):,} cells; "
                   + ("the CSV holds all." if whole else "the CSV holds those drawn (all would be about "
                      f"{csv_gigabytes(len(queries), len(keys)):.1f} GB of text)."))
    if not whole:  # the session keeps the table's maker, and with it what it closes over: the corner alone
        matrix, queries, keys = np.array(matrix[:n_q, :n_k]), queries[:n_q], keys[:n_k]
    downloads(figure, file, key, lambda: matrix_table(matrix, queries, keys))


def draw_mask(trace: Trace, site: str, key: str, layer: int | None = None) -> None:
    """The mask of `site`; of its `layer` where that layer slides or reads in chunks (a sliding window also hides the
    keys too far back, a chunk the keys of other chunks: the layer's own mask, as its attention read it)."""
    mask = SiteMask.of(trace, site, layer)
    file = name(trace, site, *(("layer", layer) if mask.window or mask.chunk else ()), "mask")
    show_corner(mask.figure(trace), mask.visible, trace, site, key, file)
    counts = ", ".join(f"{count:,} {reason}" for reason, count in mask.counts().items())
    hidden = mask.visible.size - np.count_nonzero(mask.visible)
    st.caption(f"{hidden:,} of {mask.visible.size:,} cells hidden" + (f" ({counts})." if counts else "."))


def draw_chunks(trace: Trace, layer: int) -> None:
    """Where some layers read in chunks (Llama 4): which, in words, and the mask of one of them (`layer` if it is
    chunked, else the first that is), the site's mask and its chunks together."""
    chunks = trace.facts.chunks
    if not any(chunks):
        return
    site = first_self_site(trace)
    st.markdown(f"**Chunked attention.** {chunk_words(chunks).capitalize()}. A chunked layer's mask is the mask above "
                "and its chunks together:")
    draw_mask(trace, site, "masks_mask_chunk", layer if chunks[layer] else next(i for i, c in enumerate(chunks) if c))
