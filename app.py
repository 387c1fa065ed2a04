"""Attention Atlas: the frame. Page config, the shared sidebar (model, text, masks), running the
model (cached), and navigation. Pages read the current Trace with `ui.page.current_trace()`."""

from __future__ import annotations

import weakref

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attention_atlas.model.core.devices import PRECISION_CHOICES, SPREAD, available_devices
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.ndif.status import using_key
from attention_atlas.model.registry import (
    PACKAGED,
    TOY_PREFIX,
    default_model,
    examples_for,
    is_toy_model,
    list_model_ids,
)
from attention_atlas.ui import url_state
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.ndif_choice import DEVICES as NDIF_DEVICES
from attention_atlas.ui.ndif_choice import HELP as NDIF_HELP
from attention_atlas.ui.ndif_choice import key_box, typed_key
from attention_atlas.ui.ndif_runs import RunStopped, page_words
from attention_atlas.ui.page import FRAME_KEYS, PAGES, REQUEST, TRACE, keep_frame_choices, keep_page_choices
from attention_atlas.ui.pickers import forget_head
from attention_atlas.ui.runs import RunRequest, get_runner, is_loaded, trace_for
from attention_atlas.ui.session_models import SESSION_PREFIX, session_models
from attention_atlas.ui.trace_cache import release_free_memory
from attention_atlas.ui.trace_files import (
    FILE_PREFIX,
    describe,
    file_trace,
    is_trace_file,
    server_trace_file,
    trace_files,
)

CAUSAL_CHOICES = {"as trained": "auto", "on everywhere": "on", "off everywhere": "off"}
CUSTOM = "custom"
# Less empty space above the page (Streamlit's default is 6rem), so that a 1280 x 720 projector shows the
# Overview's head without scrolling. For WCAG AA (tests/browser/test_accessibility.py): a formula (st.latex) is no
# scroll box of its own (Streamlit's scrolled by a pixel's rounding, a region no keyboard reached; a formula wider than
# its column widens the page, which scrolls); the grey Streamlit gives a figure's tick labels, axis titles and text in
# the light theme (#808495, 3.7:1 on white) darkened to 6.1:1 (the dark theme's passes). Static CSS only: nothing a
# person typed goes into HTML.
PAGE_STYLE = ("<style>[data-testid='stMainBlockContainer'] { padding-top: 2.5rem; } "
              "[data-testid='stMarkdownContainer'] .katex-display { overflow: visible; } "
              "[data-testid='stPlotlyChart'] text[style*='fill: rgb(128, 132, 149)'] { fill: #5e6170 !important; }"
              "</style>")
FALLBACK_TEXT = "The cat sat on the mat because it was tired."  # before a typed-in model is loaded
RUN_INPUTS_HIDDEN = "_run_inputs_hidden"  # session key: the last run drew no text, device … (no custom folder yet)
HELP = {
    "model": "Toy models are small transformers written and trained in this project on one task each; "
             "pretrained models are real ones shipped with the app; the models trained or uploaded on the Train page "
             "are listed for this session; Custom opens a Hugging Face model folder.",
    "text": "What the model reads. Every page shows this text's run.",
    "output": "generate: the model writes its own output (greedy), under the masks chosen below. "
              "given target: you type the output, and the model reads it (teacher forcing): each target token "
              "is shown with the probability the model gave it.",
    "causal": "The causal mask hides later tokens from earlier ones. As trained: where the model was trained "
              "with it (decoders). On everywhere: encoders too. Off everywhere: decoders may look ahead — a what-if "
              "the model never saw in training.",
    "device": "Where the model runs. auto: a GPU when there is one, else the CPU. spread (Hugging Face models): "
              "its layers over the GPUs in order, then the CPU, then the disk, each device up to its memory budget "
              "(accelerate's big-model inference), for a model larger than one device. NDIF (a folder or hub id): "
              f"{NDIF_HELP}",
    "memory": "Each device's budget, accelerate's max_memory: cpu=2GiB 0=20GiB (0, 1 …: the GPUs). A device not "
              "named gives all its free memory. Layers beyond every budget are read from the disk at each pass. A "
              "spread model serves one run at a time; the model card says where each layer is.",
    "precision": "The dtype of the weights and activations. auto: bfloat16 on a GPU that has it, float16 on other "
                 "GPUs, float32 on the CPU. Half precision takes half the memory; the numbers shown differ from "
                 "float32's in the third digit or so. The toy models always run in float32 (the model card says "
                 "which).",
}


def model_label(model_id: str) -> str:
    """The picker's groups: toy models trained here, pretrained models, any other model."""
    if model_id == CUSTOM:
        return "Custom · a Hugging Face folder or id…"
    if model_id.startswith(TOY_PREFIX):
        return f"Toy (trained here) · {model_id}"
    if model_id.startswith(SESSION_PREFIX):
        return f"This session · {model_id}"
    if is_trace_file(model_id):
        return f"Trace file · {model_id.removeprefix(FILE_PREFIX)}"
    return f"Pretrained · {model_id}" if model_id in PACKAGED else model_id


def use_example(pills_key: str) -> None:
    """Put the example clicked into the text box, and let go of the pill so it can be clicked again."""
    if st.session_state[pills_key] is not None:
        st.session_state["text"] = st.session_state[pills_key]
        st.session_state[pills_key] = None


def choose_model() -> str | None:
    """The model picker (and the folder box for a custom model); None until a custom folder is typed."""
    opened = server_trace_file()  # `attention-atlas --trace FILE`: a new session opens on it
    model_ids = [*list_model_ids(), *session_models(), *trace_files()]
    url_state.restore_once(model_ids, CUSTOM, {v: k for k, v in CAUSAL_CHOICES.items()})
    if opened is not None:
        st.session_state["model_id"] = opened
    st.session_state.setdefault("model_id", default_model(model_ids))
    model_id = st.sidebar.selectbox("Model", [*model_ids, CUSTOM], key="model_id", format_func=model_label,
                                    help=HELP["model"])
    if model_id != CUSTOM:
        return model_id
    folder = st.sidebar.text_input("Folder or hub id", key="custom_model", placeholder="/path/to/model").strip()
    return folder or None


def choose_text(model_id: str) -> str:
    """The text box, drawn before the model loads so that typing during a load is kept. One text for every
    model: a model that cannot read it falls back to its own example (see `run`)."""
    if "pending_text" in st.session_state:  # set by `run` before a rerun: a widget's value cannot change once drawn
        st.session_state["text"] = st.session_state.pop("pending_text")
    st.session_state.setdefault("text", (examples_for(model_id) or (FALLBACK_TEXT,))[0])
    return st.sidebar.text_input("Text", key="text", max_chars=url_state.MAX_TEXT_CHARS, help=HELP["text"])


def choose_device(model_id: str) -> tuple[str, str, str]:
    """The device and precision pickers (spread: a Hugging Face model only) and, for a spread model, the memory
    budgets box: (device, precision, budgets as typed, "" unless spread)."""
    spreadable = not model_id.startswith(SESSION_PREFIX) and not is_toy_model(model_id)
    remote = spreadable and model_id not in PACKAGED  # a folder or hub id: NDIF may host it (ui/ndif_choice.py)
    choices = ["auto", *available_devices(), *([SPREAD] if spreadable else []), *(NDIF_DEVICES if remote else ())]
    if st.session_state.get("device") not in choices:  # spread or NDIF, left from a Hugging Face model
        st.session_state["device"] = "auto"
    device_column, precision_column = st.sidebar.columns(2)
    device = device_column.selectbox("Device", choices, key="device", help=HELP["device"])
    precision = precision_column.selectbox("Precision", PRECISION_CHOICES, key="precision", help=HELP["precision"],
                                           disabled=device in NDIF_DEVICES)  # NDIF's to choose
    key_box(device)
    if device != SPREAD:
        return device, precision, ""
    memory = st.sidebar.text_input("Memory per device", key="device_memory", placeholder="cpu=2GiB 0=20GiB",
                                   max_chars=200, help=HELP["memory"])
    return device, precision, memory.strip()


def loading_slot(model_id: str, device: str, precision: str, memory: str) -> DeltaGenerator | None:
    """A model not loaded yet takes seconds: say so in place of the previous page. The message takes the
    place of the page's container (an element replacing a block drops the block's content), so the previous
    model's figures do not linger greyed out; the page is then drawn in the same place. None: loaded already."""
    if is_loaded(model_id, device, precision, memory):
        return None
    slot = st.empty()
    slot.info(f"Loading {model_id}…", icon=":material/hourglass_top:")
    return slot


def sidebar(page_shows_run: bool = True) -> tuple[Trace | None, DeltaGenerator | None]:
    """The run's inputs; returns the trace (None after showing what is wrong, or where the page does not draw the
    run: Train), and where a model load said it was loading (the page takes its place)."""
    st.sidebar.title("Attention Atlas")
    model_id = choose_model()
    if model_id is not None and is_trace_file(model_id):
        return show_trace_file(model_id), None
    if model_id is None:
        st.session_state[RUN_INPUTS_HIDDEN] = True
        url_state.write(model=None, text=None, tz=None, target=None)
        st.info("Type the path of a Hugging Face model folder, or a hub id, in the sidebar.")
        return None, None
    if st.session_state.pop(RUN_INPUTS_HIDDEN, False):  # the text, device … come back: with their values
        keep_frame_choices(tuple(key for key in FRAME_KEYS if key not in ("model_id", "custom_model")))
    text = choose_text(model_id)
    device, precision, memory = choose_device(model_id)
    url_state.write(model=model_id)
    slot = loading_slot(model_id, device, precision, memory)
    try:
        runner = get_runner(model_id, device, precision, memory)
    except UserError as error:
        show_error(str(error))
        return None, slot
    st.sidebar.pills("Examples", runner.examples, key=f"examples_{model_id}", on_change=use_example,
                     args=(f"examples_{model_id}",))
    for caution in runner.cautions(text):
        st.sidebar.warning(caution, icon=":material/warning:")
    target = None
    if runner.facts.kind != "encoder":
        mode = st.sidebar.radio("Output", ["generate", "given target"], key="decoder_mode", horizontal=True,
                                help=HELP["output"])
        if mode == "given target":
            target = st.sidebar.text_input("Target", key="target", help="The output the model should read.")
    causal = st.sidebar.selectbox("Causal mask", list(CAUSAL_CHOICES), key="causal", help=HELP["causal"])
    url_state.write(**url_state.pack_text(text), target=target, causal=CAUSAL_CHOICES[causal])
    if not page_shows_run:  # its inputs kept for the next page; no model run nobody looks at
        return None, slot
    request = RunRequest(model_id, device, text, target, CAUSAL_CHOICES[causal], precision, memory)
    return run(runner, request), slot


def show_trace_file(file_id: str) -> Trace | None:
    """A trace file chosen in the model list: its run is the page's (nothing to type: the sidebar says what it
    holds). Pages that need the model run the model the file names, on the file's text and masks."""
    st.session_state[RUN_INPUTS_HIDDEN] = True  # the text, device … come back with their values after
    url_state.write(model=None, text=None, tz=None, target=None)  # a link cannot carry a file
    trace = file_trace(file_id)
    if trace is None:  # pushed out by newer files (MAX_TRACE_FILES)
        st.info("That trace file is no longer open in this session: open it again on the Overview.")
        return None
    st.sidebar.markdown(describe(trace))
    name = file_id.removeprefix(FILE_PREFIX).rsplit(" · ", 1)[0]  # as the file was called (its id adds a random part)
    st.session_state[REQUEST] = RunRequest(trace.facts.model_id, "auto", trace.text, trace.target,
                                           trace.options.causal, trace_file=name)
    if st.session_state.get("model_shown") != file_id:
        forget_head()  # another run's layer and head mean nothing here
        st.session_state["model_shown"] = file_id
    return trace


def run(runner: Runner, request: RunRequest) -> Trace | None:
    """The trace of this input (attention patterns only). Right after a switch of model, a text the new model
    cannot read is replaced by its first example, and the person is told."""
    model_id, text = request.model_id, request.text
    switched = st.session_state.get("model_shown") != model_id
    if switched and st.session_state.get("model_shown") is not None:
        forget_head()  # another model's layer and head mean nothing here
    try:
        trace, kept = trace_for(request, summarised=True)
    except UserError as error:
        if switched and text != runner.examples[0] and not isinstance(error, RunStopped):
            st.session_state["pending_text"] = runner.examples[0]
            st.session_state["text_note"] = f"{model_id} cannot read the text you had ({error}) It shows its own " \
                                            "example instead; the text box is yours to change."
            st.session_state["model_shown"] = model_id
            st.rerun()
        show_error(str(error))
        return None
    st.session_state["model_shown"] = model_id
    st.session_state[REQUEST] = request
    if "text_note" in st.session_state:
        st.info(st.session_state.pop("text_note"), icon=":material/info:")
    if not kept:
        st.info("This run is too large to keep in the server's memory budget: changing a layer or view will "
                "re-run it.", icon=":material/memory:")
    return trace


def main() -> None:
    st.set_page_config(page_title="Attention Atlas", page_icon="🔍", layout="wide")
    st.html(PAGE_STYLE)
    pages = [st.Page(page.file, title=page.title, icon=page.icon) for page in PAGES]
    navigation = st.navigation(pages)
    keep_page_choices(navigation.url_path)
    st.session_state.pop(TRACE, None)  # else Streamlit keeps the last run's trace beside this run's until the next
    shown = next(page for page, streamlit_page in zip(PAGES, pages, strict=True)
                 if streamlit_page.url_path == navigation.url_path)
    trace, slot = sidebar(shown.shows_run)
    st.session_state[TRACE] = trace
    try:
        with slot.container() if slot is not None else st.container(), using_key(typed_key()), page_words():
            navigation.run()  # one block for the page (`loading_slot`); what it asks NDIF itself (a layer it opens, a
            # generation), sent with this session's key and its words shown
    finally:  # between runs, the session holds its trace weakly: the cache decides how long a trace lives
        st.session_state[TRACE] = None if trace is None else weakref.proxy(trace)
        release_free_memory()


main()
