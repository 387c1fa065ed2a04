"""Attention Atlas: the frame. Page config, the shared sidebar (model, text, masks), running the
model (cached), and navigation. Pages read the current Trace from `st.session_state["trace"]`."""

from __future__ import annotations

import streamlit as st

from model.devices import available_devices, pick_device
from model.registry import PACKAGED, TOY_PREFIX, list_model_ids, load_runner
from model.runner import Runner, RunOptions
from model.tracing import Trace
from ui import url_state
from ui.messages import show_error
from ui.trace_cache import cached_trace

CAUSAL_CHOICES = {"as trained": "auto", "on everywhere": "on", "off everywhere": "off"}
CUSTOM = "custom"


def model_label(model_id: str) -> str:
    """The picker's groups: toy models trained here, pretrained models, any other model."""
    if model_id == CUSTOM:
        return "Custom · a Hugging Face folder or id…"
    if model_id.startswith(TOY_PREFIX):
        return f"Toy (trained here) · {model_id}"
    return f"Pretrained · {model_id}" if model_id in PACKAGED else model_id


@st.cache_resource(show_spinner="Loading the model… (SmolLM2's first load converts its weights: about 30 s)")
def get_runner(model_id: str, device: str) -> Runner:
    """One loaded model per id and device, shared by every session (never mutated)."""
    return load_runner(model_id, device=pick_device(device))


def get_trace(model_id: str, device: str, text: str, target: str | None, causal: str) -> tuple[Trace, bool]:
    """One trace per input, keyed by plain values, in the server's byte-bounded cache; changing a layer or head
    never reruns the model unless the trace was too large to keep (False). Only attention patterns are
    captured: the pages read those and the outputs."""
    runner, options = get_runner(model_id, device), RunOptions(hooks=("*.hook_pattern",), causal=causal)
    return cached_trace((model_id, device, text, target, causal), lambda: runner.run(text, target, options))


def use_example(pills_key: str, text_key: str) -> None:
    """Put the example clicked into the text box, and let go of the pill so it can be clicked again."""
    if st.session_state[pills_key] is not None:
        st.session_state[text_key] = st.session_state[pills_key]
        st.session_state[pills_key] = None


def sidebar() -> Trace | None:
    """The run's inputs; returns the trace, or None after showing what is wrong."""
    st.sidebar.title("Attention Atlas")
    model_ids = list_model_ids()
    url_state.restore_once(model_ids, CUSTOM, {v: k for k, v in CAUSAL_CHOICES.items()})
    model_id = st.sidebar.selectbox("Model", [*model_ids, CUSTOM], key="model_id", format_func=model_label)
    if model_id == CUSTOM:
        model_id = st.sidebar.text_input("Folder or hub id", key="custom_model", placeholder="/path/to/model").strip()
        if not model_id:
            url_state.write(model=None, text=None, target=None)
            st.info("Type the path of a Hugging Face model folder, or a hub id, in the sidebar.")
            return None
    device = st.sidebar.selectbox("Device", ["auto", *available_devices()], key="device")
    url_state.write(model=model_id)
    try:
        runner = get_runner(model_id, device)
    except ValueError as error:
        show_error(str(error))
        return None
    text_key = f"text_{model_id}"
    st.session_state.setdefault(text_key, runner.examples[0])
    text = st.sidebar.text_input("Text", key=text_key, max_chars=20_000)
    st.sidebar.pills("Examples", runner.examples, key=f"examples_{model_id}", on_change=use_example,
                     args=(f"examples_{model_id}", text_key))
    target = None
    if runner.facts.kind != "encoder":
        mode = st.sidebar.radio("Output", ["generate", "given target"], key="decoder_mode", horizontal=True)
        if mode == "given target":
            target = st.sidebar.text_input("Target", key=f"target_{model_id}")
    causal = st.sidebar.selectbox("Causal mask", list(CAUSAL_CHOICES), key="causal")
    url_state.write(text=text, target=target, causal=CAUSAL_CHOICES[causal])
    try:
        trace, kept = get_trace(model_id, device, text, target, CAUSAL_CHOICES[causal])
    except ValueError as error:
        show_error(str(error))
        return None
    if not kept:
        st.info("This run is too large to keep in the server's memory budget: changing a layer or view will "
                "re-run it.", icon=":material/memory:")
    return trace


def main() -> None:
    st.set_page_config(page_title="Attention Atlas", page_icon="🔍", layout="wide")
    st.session_state.pop("trace", None)  # else Streamlit keeps the last run's trace beside this run's until the next
    st.session_state["trace"] = sidebar()
    st.navigation([
        st.Page("app_pages/overview.py", title="Overview", icon=":material/summarize:", default=True),
        st.Page("app_pages/attention.py", title="Attention", icon=":material/grid_on:"),
    ]).run()


main()
