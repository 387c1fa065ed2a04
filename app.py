"""Attention Atlas: the frame. Page config, the shared sidebar (model, text, masks), running the
model (cached), and navigation. Pages read the current Trace from `st.session_state["trace"]`."""

from __future__ import annotations

import streamlit as st

from model.devices import available_devices, pick_device
from model.registry import list_model_ids, load_runner
from model.runner import Runner, RunOptions
from model.tracing import Trace

CAUSAL_CHOICES = {"as trained": "auto", "on everywhere": "on", "off everywhere": "off"}
CUSTOM = "a Hugging Face folder or id…"


@st.cache_resource(show_spinner="Loading the model… (SmolLM2's first load converts its weights: about 30 s)")
def get_runner(model_id: str, device: str) -> Runner:
    """One loaded model per id and device, shared by every session (never mutated)."""
    return load_runner(model_id, device=pick_device(device))


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def get_trace(model_id: str, device: str, text: str, target: str | None, causal: str) -> Trace:
    """One trace per input, keyed by plain values; changing a layer or head never reruns the model."""
    return get_runner(model_id, device).run(text, target, RunOptions(causal=causal))


def sidebar() -> Trace | None:
    """The run's inputs; returns the trace, or None after showing what is wrong."""
    st.sidebar.title("Attention Atlas")
    model_id = st.sidebar.selectbox("Model", [*list_model_ids(), CUSTOM], key="model_id")
    if model_id == CUSTOM:
        model_id = st.sidebar.text_input("Folder or hub id", key="custom_model", placeholder="/path/to/model")
        if not model_id.strip():
            st.info("Type the path of a Hugging Face model folder, or a hub id, in the sidebar.")
            return None
    device = st.sidebar.selectbox("Device", ["auto", *available_devices()], key="device")
    try:
        runner = get_runner(model_id.strip(), device)
    except ValueError as error:
        st.error(str(error))
        return None
    text = st.sidebar.text_input("Text", value=runner.examples[0], key=f"text_{model_id}", max_chars=20_000)
    st.sidebar.caption("Examples: " + " · ".join(runner.examples))
    target = None
    if runner.facts.kind != "encoder":
        mode = st.sidebar.radio("Output", ["generate", "given target"], key="decoder_mode", horizontal=True)
        if mode == "given target":
            target = st.sidebar.text_input("Target", key=f"target_{model_id}")
    causal = st.sidebar.selectbox("Causal mask", list(CAUSAL_CHOICES), key="causal")
    st.session_state["trace_key"] = repr((model_id, device, text, target, causal))
    try:
        return get_trace(model_id, device, text, target, CAUSAL_CHOICES[causal])
    except ValueError as error:
        st.error(str(error))
        return None


def main() -> None:
    st.set_page_config(page_title="Attention Atlas", page_icon="🔍", layout="wide")
    st.session_state["trace"] = sidebar()
    st.navigation([
        st.Page("app_pages/overview.py", title="Overview", icon=":material/summarize:", default=True),
        st.Page("app_pages/attention.py", title="Attention", icon=":material/grid_on:"),
    ]).run()


main()
