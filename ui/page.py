"""What every page shares: the current trace (or a stop, when the frame has said why there is none), and
the page choices that must outlive a visit to another page."""

from __future__ import annotations

import streamlit as st

from model.tracing import Trace

# Widget keys whose values must survive a visit to a page that does not draw them (Streamlit forgets the
# state of a widget not drawn in a run; writing the value back at the start of every run keeps it).
PERSISTENT_KEYS = (
    "site", "layer", "head", "attention_hide_special", "attention_colorscale", "attention_show_values",
    "attention_window_row", "attention_window_col", "attention_window_diagonal", "attention_stats_measure",
)
TRACE = "trace"


def keep_page_choices() -> None:
    """Call at the start of every run, before any widget is drawn."""
    for key in PERSISTENT_KEYS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def current_trace() -> Trace:
    """The trace the sidebar made for this run; stops the page when there is none (the frame said why)."""
    trace: Trace | None = st.session_state.get(TRACE)
    if trace is None:
        st.stop()
    return trace

