"""Attention Atlas: the frame. Page config, the shared sidebar (model, text, masks), running the
model (cached), and navigation. Pages read the current Trace from `st.session_state["trace"]`."""

from __future__ import annotations

import streamlit as st

from model.registry import list_model_ids, load_runner
from model.runner import Runner, RunOptions
from model.tracing import Trace

CAUSAL_CHOICES = {"as trained": "auto", "on everywhere": "on", "off everywhere": "off"}


@st.cache_resource(show_spinner="Loading the model…")
def get_runner(model_id: str) -> Runner:
    """One loaded model per id, shared by every session (never mutated)."""
    return load_runner(model_id)


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def get_trace(model_id: str, text: str, target: str | None, causal: str) -> Trace:
    """One trace per input, keyed by plain values; changing a layer or head never reruns the model."""
    return get_runner(model_id).run(text, target, RunOptions(causal=causal))


def sidebar() -> Trace | None:
    """The run's inputs; returns the trace, or None after showing what is wrong."""
    st.sidebar.title("Attention Atlas")
    model_id = st.sidebar.selectbox("Model", list_model_ids(), key="model_id")
    runner = get_runner(model_id)
    text = st.sidebar.text_input("Text", value=runner.examples[0], key=f"text_{model_id}", max_chars=2000)
    st.sidebar.caption("Examples: " + " · ".join(runner.examples))
    target = None
    mode = st.sidebar.radio("Decoder input", ["generate", "given target"], key="decoder_mode", horizontal=True)
    if mode == "given target":
        target = st.sidebar.text_input("Target", key=f"target_{model_id}")
    causal = st.sidebar.selectbox("Causal mask", list(CAUSAL_CHOICES), key="causal")
    try:
        return get_trace(model_id, text, target, CAUSAL_CHOICES[causal])
    except ValueError as error:
        st.error(str(error))
        return None


def main() -> None:
    st.set_page_config(page_title="Attention Atlas", page_icon="🔍", layout="wide")
    st.session_state["trace"] = sidebar()
    st.navigation([st.Page("app_pages/overview.py", title="Overview", icon="🔍", default=True)]).run()


main()
