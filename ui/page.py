"""What every page shares: the page registry, the current trace (or a stop, when the frame has said why there
is none), and the page choices that must outlive a visit to another page.

Adding a page: write `pages/<name>.py` (start with `trace = current_trace()`, or `trace_with(hooks)` for a
page that shows more than attention patterns; cache what it derives from the trace with
`ui.trace_cache.per_trace`; prefix its widget keys with its name), add one `Page` line to PAGES
below with the widget keys that should survive a visit elsewhere (`keeps`; and in `ui/url_state.py` those a link
should carry)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from attention_atlas import app_pages
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import AblationMode, CausalMode, Head
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.runs import RunRequest, runner_of, trace_for


@dataclass(frozen=True)
class Page:
    """One page of the app: its file, its title in the navigation, its icon, and the choices it keeps."""

    path: str  # relative to the folder that holds pages/ (as AppTest.switch_page takes it from app.py)
    title: str
    icon: str
    keeps: tuple[str, ...] = ()  # keys of its widgets whose values outlive a visit elsewhere (`keep_page_choices`)
    shows_run: bool = True  # whether it draws the sidebar's run (Train trains a model of its own instead)

    @property
    def file(self) -> Path:
        """The page's script wherever the app is installed (Streamlit would read `path` beside the frame)."""
        return Path(app_pages.__file__).resolve().parent.parent / self.path


HEAD_KEYS = ("site", "layer", "head")  # the head picker's (ui/pickers.py): one choice for every page that draws it
WHY_KEYS = ("why_open", "why_query", "why_key", "why_view")  # the cell "Why here?" explains (ui/why_here.py): one
# choice for both pages that draw it
PAGES = (  # the navigation, in order; the first is where the app opens
    Page("app_pages/overview.py", "Overview", ":material/summarize:", HEAD_KEYS),
    Page("app_pages/tour.py", "Tour", ":material/route:", ("tour_step", "tour_head", "tour_present", "tour_predict")),
    Page("app_pages/attention.py", "Attention", ":material/grid_on:", (
        *HEAD_KEYS, "attention_hide_special", "attention_colorscale", "attention_show_values", "attention_window_row",
        "attention_window_col", "attention_window_diagonal", "attention_stats_measure",
        "attention_compare_kind", "attention_compare_text", "attention_compare_heads", "attention_compare_mode",
        "attention_compare_model", "attention_compare_folder", "attention_draw", *WHY_KEYS)),
    Page("app_pages/masks.py", "Masks", ":material/visibility_off:", (
        *HEAD_KEYS, "masks_editor", "masks_hide", "masks_for", "masks_window", "masks_pad_to")),
    Page("app_pages/positions.py", "Positional encoding", ":material/waves:", (
        "positions_stack", "positions_measure", "positions_length", "positions_d_model", "positions_dims",
        "positions_offset", "positions_pos", "positions_pair")),
    Page("app_pages/step_through.py", "Step through", ":material/footprint:", (
        *HEAD_KEYS, "step_show_values", "step_query", *WHY_KEYS)),
    Page("app_pages/activations.py", "Activations", ":material/stacked_line_chart:", (
        "activations_stack", "activations_residual_measure", "activations_layer", "activations_neuron",
        "activations_topk", "activations_norm_log", "activations_lens_start", "activations_shape_filter",
        "activations_shape_leaves", "activations_shape_layer", "activations_ssd_layer", "activations_ssd_head")),
    Page("app_pages/generate.py", "Generate", ":material/play_arrow:", (
        "generate_method", "generate_temperature", "generate_top_k", "generate_top_p", "generate_seed",
        "generate_max_new", "generate_layer")),
    Page("app_pages/ablation.py", "Ablate heads", ":material/content_cut:", (
        "ablation_heads", "ablation_every", "ablation_mode")),
    Page("app_pages/attribution.py", "Attribution", ":material/leaderboard:", (
        "attribution_position", "attribution_answer", "attribution_wrong", "attribution_corrupted",
        "attribution_patch_kinds", "attribution_patch_show", "attribution_graph_threshold",
        "attribution_circuit_method", "attribution_circuit_steps", "attribution_circuit_edges")),
    Page("app_pages/train.py", "Train", ":material/model_training:", (
        "train_task", "train_layers", "train_heads", "train_d_model", "train_d_ff", "train_norm", "train_schedule",
        "train_lr", "train_warmup", "train_smoothing", "train_batch", "train_steps", "train_every", "train_device",
        "train_play", "train_site", "train_score", "train_head"), shows_run=False),
)
# Every page's kept keys, on every page: each value must survive a visit to a page that does not draw it, or draws
# its own widget under the same key. Streamlit ties a widget's state to the widget of the last run:
# `keep_page_choices` keeps a copy of each value and writes it back when the page changes or the widget's own state is
# gone. Writing every key back on every run would make each drawn widget push its value to the browser, undoing a
# choice the person made while that run was still drawing.
KEPT_KEYS = tuple(dict.fromkeys(key for page in PAGES for key in page.keeps))
PAGE_RUN_MAX_TOKENS = 2048  # longest text of a page's own run that keeps more than attention patterns (the length
# those pages were built and tested at; 8,192 SmolLM2 tokens of scores or residual streams would be gigabytes)
# The sidebar's widget keys. Every page draws them, so their state is never lost; but the browser may not hold the
# value the session gave one (a default or a link's choice, sent once, with the run that set it): a page opened
# while that run was still drawing (a session's first seconds, on a loaded machine) redraws the sidebar from the new
# page's run, and the browser falls back to each widget's own default — the model list's first model, an empty
# text — and sends those with the next click, which switched the model. `keep_page_choices` writes them back too.
FRAME_KEYS = ("model_id", "custom_model", "text", "device", "device_memory", "precision", "decoder_mode", "target",
              "causal")
TRACE = "trace"  # session key of the frame's trace for this run (None when there is none)
REQUEST = "run_request"  # session key of the RunRequest that made it


KEPT = "_kept_choices"  # session key of {widget key: its last value}
LAST_PAGE = "_last_page"  # session key of the url path the last run drew


def keep_page_choices(page_path: str) -> None:
    """Call at the start of every run, before any widget is drawn, with the path of the page this run draws. The
    sidebar's choices are kept the same way: a page that opens another (`st.switch_page`) reruns without the
    browser's widget states, and the sidebar would fall back to its defaults (another model)."""
    kept: dict[str, object] = st.session_state.setdefault(KEPT, {})
    another_page = st.session_state.get(LAST_PAGE) != page_path
    st.session_state[LAST_PAGE] = page_path
    for key in (*KEPT_KEYS, *FRAME_KEYS):
        if key in st.session_state:
            kept[key] = st.session_state[key]
        if key in kept and (another_page or key not in st.session_state):
            st.session_state[key] = kept[key]


def keep_frame_choices(keys: tuple[str, ...]) -> None:
    """Write these sidebar values back into the session, before their widgets are drawn: this run sends them to the
    browser (which otherwise shows a widget's own default where it did not draw the widget in the last run)."""
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def forget_choices(*keys: str) -> None:
    """Drop these choices (and their kept copies), so that the next page opens them on its defaults."""
    kept: dict[str, object] = st.session_state.get(KEPT, {})
    for key in keys:
        st.session_state.pop(key, None)
        kept.pop(key, None)


def current_trace() -> Trace:
    """The trace the sidebar made for this run; stops the page when there is none (the frame said why)."""
    trace: Trace | None = st.session_state.get(TRACE)
    if trace is None:
        st.stop()
    return trace



def current_request() -> RunRequest:
    """What the sidebar asked for in this run; stops the page when there is no trace."""
    current_trace()
    return st.session_state[REQUEST]


def current_runner() -> Runner:
    """The loaded model of this run (shared by every session: read its weights, never change them). A trace file's
    run: the model that made it, where this server has it; else the page says so and stops."""
    try:
        return runner_of(current_request())
    except UserError as error:
        show_error(str(error))
        st.stop()


def weights_here(what: str) -> bool:
    """Whether this run's model has its weights on this machine (a model run on NDIF keeps them there: its runner's
    `weights_here` is False); where not, says that `what` reads them and is not shown."""
    if getattr(current_runner(), "weights_here", True):
        return True
    st.info(f"{what} reads the model's own weights, which stay on NDIF with the model: not shown for a model run "
            "there.", icon=":material/cloud:")
    return False


def trace_with(hooks: tuple[str, ...], causal: CausalMode | None = None, pad_to: int = 0,
               blocked: tuple[tuple[int, int], ...] = (), ablated: tuple[Head, ...] = (),
               ablation: AblationMode = "zero") -> Trace:
    """This run's input traced again capturing `hooks` (glob patterns; ask only for what the page shows: a
    2,048-token run's every hook is gigabytes), under another causal choice ("auto", "on", "off"), extra masks
    or ablated heads if given. Cached like the frame's trace. A run that fails shows why and stops the page (a
    page with something else to show then calls `ui.runs.trace_for` itself and catches its ValueError), and so
    does a text over PAGE_RUN_MAX_TOKENS when `hooks` ask for more than attention patterns."""
    if current_request().trace_file:
        shown = current_trace()
        same_masks = causal in (None, shown.options.causal) and not (pad_to or blocked or ablated)
        if same_masks and holds(shown, hooks):
            return shown  # the trace file recorded what the page reads: the model is not needed
    stop_if_too_long(hooks, pad_to)
    try:
        trace, kept = trace_for(current_request(), hooks, causal, pad_to, blocked, ablated, ablation)
    except UserError as error:
        show_error(str(error))
        st.stop()
    if not kept:
        st.info("This page's run is too large to keep in the server's memory budget: changing a choice will "
                "re-run it.", icon=":material/memory:")
    return trace


def holds(trace: Trace, hooks: tuple[str, ...]) -> bool:
    """Whether `trace` was run capturing at least `hooks` (every hook, or these very patterns) and nothing else."""
    recorded = trace.options
    return ("*" in recorded.hooks or set(hooks) <= set(recorded.hooks)) and not (
        recorded.pad_to or recorded.blocked or recorded.ablated)


def stop_if_too_long(hooks: tuple[str, ...], pad_to: int = 0) -> None:
    """Stop the page with a message when its run would keep more than attention patterns (which cost
    O(tokens x d_head) a layer: model/core/attention/source.py) for a text over PAGE_RUN_MAX_TOKENS tokens."""
    trace = current_trace()
    length = max(len(trace.tokens), len(trace.target_tokens), pad_to)
    if length <= PAGE_RUN_MAX_TOKENS or all(hook.endswith(".hook_pattern") for hook in hooks):
        return
    if any("attn_scores" in hook for hook in hooks):
        kept = "each head's scores, a number for every pair of tokens (its memory grows with the length squared)"
    else:
        kept = "the model's values at every token (its memory grows with the length)"
    st.info(f"This page reads texts of up to {PAGE_RUN_MAX_TOKENS:,} tokens, and this one has {length:,}. Its run "
            f"keeps {kept}, and the page was built and tested up to that length. The Overview and Attention pages "
            "show the whole text.", icon=":material/straighten:")
    st.stop()


def show_open_tab(views: Sequence[str], shows: Sequence[Callable[..., None]], key: str, *args: object) -> None:
    """Tabs named `views`, bound to the URL's `key`; only the open one runs its `shows` function with `args` (the
    others cost nothing and send nothing to the browser)."""
    for tab, show in zip(st.tabs(list(views), key=key, bind="query-params"), shows, strict=True):
        if tab.open:
            with tab:
                show(*args)
