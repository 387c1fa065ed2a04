"""The site / layer / head pickers shared by the pages, and opening a head from a clicked thumbnail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from model.tracing import Trace
from ui import url_state
from viz.thumbnails import head_at

SITE_LABELS = {
    "encoder.attn": "encoder self-attention",
    "decoder.attn": "decoder self-attention (masked)",
    "decoder.cross_attn": "cross-attention (decoder → encoder)",
}


def _keep_valid(key: str, options: Sequence[Any]) -> None:
    """A value from the URL or from another model may not fit this one: fall back to the first choice."""
    if key in st.session_state and st.session_state[key] not in options:
        st.session_state[key] = options[0]


def choose_head(trace: Trace, page: str) -> tuple[str, int, int]:
    """Site, layer and head pickers keyed `<page>_site` etc.; the choice goes into the URL."""
    sites = trace.sites()
    _keep_valid(f"{page}_site", sites)
    site = st.radio("Attention", sites, key=f"{page}_site", horizontal=True, format_func=SITE_LABELS.get)
    layers, heads = list(range(trace.n_layers(site))), list(range(trace.facts.n_heads))
    _keep_valid(f"{page}_layer", layers)
    _keep_valid(f"{page}_head", heads)
    col_layer, col_head = st.columns(2)
    layer = col_layer.selectbox("Layer", layers, key=f"{page}_layer")
    head = col_head.selectbox("Head", heads, key=f"{page}_head")
    url_state.write(site=site, layer=layer, head=head)
    return site, layer, head


def open_clicked_head(chart_key: str, page: str, heads: int, *, set_layer: bool = True) -> bool:
    """If a thumbnail of the chart `chart_key` was clicked since the last run, make its head the chosen
    one and say so. Call before `choose_head` (a widget's state cannot change once it is drawn in a run)."""
    event = st.session_state.get(chart_key)
    points = [p for p in event.selection.points if p.get("curve_number") == 1] if event else []  # the markers
    seen_key = f"{chart_key}_seen"
    if points == st.session_state.get(seen_key, []):
        return False  # nothing new: the pickers may have moved on since
    st.session_state[seen_key] = points
    if not points:
        return False
    layer, head = head_at(points[0]["point_index"], heads)
    if set_layer:
        st.session_state[f"{page}_layer"] = layer
    st.session_state[f"{page}_head"] = head
    return True
