"""The Masks page's custom mask: chosen keys hidden from chosen queries, or a window; its choices kept in the URL."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from attention_atlas.model.core.masks import hidden_key_pairs, outside_window_pairs
from attention_atlas.ui import url_state
from attention_atlas.ui.pickers import keep_valid
from attention_atlas.viz.tokens import position_label

EDITORS = ["hide words", "window"]


def editor_pairs(tokens: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """The custom mask's controls; returns its blocked (query, key) pairs."""
    n = len(tokens)
    keep_valid("masks_editor", EDITORS)
    mode = st.radio("Custom mask", EDITORS, key="masks_editor", horizontal=True,
                    help="hide words: chosen keys hidden from chosen queries. window: each token sees only keys "
                         "within a distance (a band).")
    label = lambda i: position_label(i, tokens[i])  # noqa: E731
    for key in ("masks_hide", "masks_for"):
        seed_list(key, n)
    if mode == "window":
        st.session_state["masks_window"] = min(max(0, st.session_state.get("masks_window", 1)), n - 1)
        width = st.slider("Each token sees keys at most this many positions away", 0, n - 1, key="masks_window")
        url_state.write(masks_editor=mode, masks_window=width)
        return outside_window_pairs(n, width)
    keys_col, queries_col = st.columns(2)
    keys = keys_col.multiselect("Hide these keys", range(n), key="masks_hide", format_func=label)
    queries = queries_col.multiselect("from these queries (none chosen: every query)", range(n), key="masks_for",
                                      format_func=label)
    url_state.write(masks_editor=mode, masks_hide=",".join(map(str, keys)) or None,
                    masks_for=",".join(map(str, queries)) or None)
    return hidden_key_pairs(n, keys, queries) if keys else ()


def seed_list(key: str, n: int) -> None:
    """A list widget's value: from a link on the first visit ("1,3"), kept to positions that exist."""
    if key not in st.session_state and key in st.query_params:
        st.session_state[key] = [int(v) for v in st.query_params[key].split(",") if v.isdigit()]
    if key in st.session_state:
        st.session_state[key] = [v for v in st.session_state[key] if v < n]
