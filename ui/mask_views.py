"""What the Masks page's tabs share: a matrix drawn at most DRAWN x DRAWN with its downloads, a site's mask with
what hides each cell, and the self-attention that padding and a custom mask apply to."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.downloads import csv_fits, csv_gigabytes, downloads, file_name, matrix_table
from attention_atlas.viz.heatmap import attention_heatmap
from attention_atlas.viz.masks import hidden_counts, hidden_reasons, mask_figure

DRAWN = 96  # the most rows and columns drawn (three figures side by side); the CSVs hold everything


def name(trace: Trace, *parts: object) -> str:
    """A file name stem: model, then the parts."""
    return file_name(trace.facts.model_id, *parts)


def first_self_site(trace: Trace) -> str:
    """The self-attention that padding and blocked pairs apply to: the encoder's, or a decoder-only model's."""
    return "decoder.attn" if trace.facts.kind == "decoder" else "encoder.attn"


def hiding(trace: Trace, site: str) -> tuple[bool, tuple[tuple[int, int], ...]]:
    """(whether the causal mask hides keys at `site`, the blocked pairs that apply to it)."""
    s = Site.of(site)
    blocked = trace.options.blocked if site == first_self_site(trace) else ()
    return not s.is_cross and trace.options.causal_for(s.stack), tuple(blocked)


def heatmap(matrix: np.ndarray, trace: Trace, site: str, title: str, key: str, file: str, **options) -> None:
    """A (q_len, k_len) matrix of `trace` at `site`, its first DRAWN rows and columns, with its downloads: the CSV
    holds the whole matrix where it fits (`csv_fits`), else the corner drawn."""
    queries, keys = trace.query_tokens(site), trace.key_tokens(site)
    n_q, n_k = min(len(queries), DRAWN), min(len(keys), DRAWN)
    masked = options.pop("masked", None)
    figure = options.pop("draw", attention_heatmap)(
        matrix[:n_q, :n_k], queries[:n_q], keys[:n_k], title, height=420,
        **({"masked": masked[:n_q, :n_k]} if masked is not None else {}), **options)
    st.plotly_chart(figure, key=key)
    whole = csv_fits(len(queries), len(keys))
    if max(len(queries), len(keys)) > max(n_q, n_k):
        st.caption(f"Drawn: the first {n_q} × {n_k} of {len(queries):,} × {len(keys):,} cells; "
                   + ("the CSV holds all." if whole else "the CSV holds those drawn (all would be about "
                      f"{csv_gigabytes(len(queries), len(keys)):.1f} GB of text)."))
    if not whole:  # the session keeps the table's maker, and with it what it closes over: the corner alone
        matrix, queries, keys = np.array(matrix[:n_q, :n_k]), queries[:n_q], keys[:n_k]
    downloads(figure, file, key, lambda: matrix_table(matrix, queries, keys))


def layer_mask(trace: Trace, site: str, layer: int | None) -> tuple[int, np.ndarray]:
    """(the layer's sliding window, 0 for none; the mask (q_len, k_len) bool its attention read): the site's mask,
    and in a sliding-window layer only the keys less than the window away (back, with a causal mask)."""
    self_attention = not Site.of(site).is_cross and trace.facts.windows and layer is not None
    window = trace.facts.windows[layer] if self_attention else 0
    visible = trace.masks[site]
    if window:
        distance = np.subtract.outer(np.arange(visible.shape[0]), np.arange(visible.shape[1]))  # query - key
        visible = visible & (np.abs(distance) < window)
    return window, visible


def draw_mask(trace: Trace, site: str, key: str, layer: int | None = None) -> None:
    """The mask of `site`; of its `layer` where that layer slides (a sliding window also hides the keys too far
    back: the layer's own mask, as its attention read it)."""
    window, visible = layer_mask(trace, site, layer)
    causal, blocked = hiding(trace, site)

    def draw(matrix: np.ndarray, *labels, **options):  # the drawn corner of the mask
        return mask_figure(matrix, hidden_reasons(matrix, causal, blocked, window), *labels, **options)

    title = f"mask · {Site.of(site).label}" + (f" · layer {layer} (a window of {window})" if window else "")
    heatmap(visible, trace, site, title, key, name(trace, site, *(("layer", layer) if window else ()), "mask"),
            draw=draw)
    counts = ", ".join(f"{count:,} {reason}" for reason, count in
                       hidden_counts(visible, causal, blocked, window).items())
    hidden = visible.size - np.count_nonzero(visible)
    st.caption(f"{hidden:,} of {visible.size:,} cells hidden" + (f" ({counts})." if counts else "."))
