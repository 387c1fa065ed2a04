"""Running the models for every page: loaded models shared by all sessions, and traces through the server's
byte-bounded cache (ui/trace_cache.py).

The frame (app.py) makes the run the sidebar asks for, capturing attention patterns only, and keeps its
`RunRequest` in the session. A page that needs more than patterns (scores, queries, activations...) or other
masks (a padding demo, blocked pairs) asks for its own run with `ui.page.trace_with`: the same request with
other hooks or options, cached under its own key in the same budget.

Whatever goes wrong while loading a model or running it reaches the pages as a UserError whose message a person
can read: the model's own UserErrors as they are, anything else (a bug, a broken folder, an out-of-memory error with
no CPU to fall back to) as a short message, with the traceback in the server log only.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import streamlit as st

from attention_atlas.model.core.devices import SPREAD, is_out_of_memory, pick_device, pick_precision
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import AblationMode, CausalMode, Head, RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.placement import Placement, parse_budgets
from attention_atlas.model.ndif.status import using_key
from attention_atlas.model.registry import list_model_ids, load_runner
from attention_atlas.ui.ndif_choice import DEVICES as NDIF_DEVICES
from attention_atlas.ui.ndif_choice import NDIF, NDIF_SIMULATED, typed_key
from attention_atlas.ui.ndif_runs import key_identity, stoppable
from attention_atlas.ui.session_models import session_runner
from attention_atlas.ui.trace_cache import cached_trace

T = TypeVar("T")
LOG = logging.getLogger(__name__)
PATTERNS = ("*.hook_pattern",)  # what the frame's run captures: the Overview and Attention pages read no more
MAX_CUSTOM_MODELS = 2  # custom folders kept loaded at once (the named models are a fixed, small set)


@dataclass(frozen=True)
class RunRequest:
    """What the sidebar asks for: the model, where it runs, the text, the target (None: generate) and the
    causal choice. Plain values: part of every cache key."""

    model_id: str
    device: str  # "auto", a device, SPREAD, or NDIF / NDIF_SIMULATED (ui/ndif_choice.py: run on NDIF through nnsight)
    text: str
    target: str | None
    causal: CausalMode
    precision: str = "auto"  # "auto", "float32", "bfloat16" or "float16" (model/core/devices.py)
    memory: str = ""  # with device SPREAD: each device's budget as typed ("cpu=2GiB 0=20GiB"; model/hf/placement.py)
    trace_file: str = ""  # the trace file the frame's trace was read from (ui/trace_files.py), "" for a run made here

    def options(self, hooks: tuple[str, ...] = PATTERNS, causal: CausalMode | None = None, pad_to: int = 0,
                blocked: tuple[tuple[int, int], ...] = (), ablated: tuple[Head, ...] = (),
                ablation: AblationMode = "zero") -> RunOptions:
        """RunOptions capturing `hooks`, under the request's causal choice unless `causal` is given."""
        return RunOptions(hooks=hooks, causal=causal or self.causal, pad_to=pad_to, blocked=blocked,
                          ablated=ablated, ablation=ablation)


def runner_of(request: RunRequest) -> Runner:
    """The loaded model `request` runs (`get_runner`). For a trace file's request, the model that made the file,
    loaded here where this server has it; UserError saying what the file allows otherwise."""
    try:
        return get_runner(request.model_id, request.device, request.precision, request.memory)
    except UserError as error:
        if not request.trace_file:
            raise
        raise UserError(f"This view runs the model itself, and the trace file {request.trace_file} was made by "
                        f"{request.model_id}, which this server cannot open ({error}). The Overview and Attention "
                        "pages show the file's own run.") from error


@st.cache_resource(show_spinner=False)
def _loaded() -> weakref.WeakValueDictionary:
    """(model id, device, precision, memory) -> its runner, while some cache or session still holds it."""
    return weakref.WeakValueDictionary()


def is_loaded(model_id: str, device: str, precision: str = "auto", memory: str = "") -> bool:
    return (model_id, device, precision, memory) in _loaded() or session_runner(model_id) is not None


def _load(model_id: str, device: str, precision: str, memory: str) -> Runner:
    if device in NDIF_DEVICES:  # nnsight is imported only here (ui/ndif_choice.py)
        from attention_atlas.model.ndif.opening import open_ndif

        runner: Runner = open_ndif(model_id, simulate=device == NDIF_SIMULATED)
        _loaded()[(model_id, device, precision, memory)] = runner
        return runner
    placement = Placement(parse_budgets(memory)) if device == SPREAD else None
    where = pick_device("auto" if placement else device)
    runner = load_runner(model_id, device=where, precision=pick_precision(precision, where), placement=placement)
    _loaded()[(model_id, device, precision, memory)] = runner
    return runner


@st.cache_resource(show_spinner="Loading the model… (SmolLM2's first load converts its weights: about 30 s)")
def _named_runner(model_id: str, device: str, precision: str, memory: str) -> Runner:
    return _load(model_id, device, precision, memory)


@st.cache_resource(show_spinner="Loading the model…", max_entries=MAX_CUSTOM_MODELS)
def _custom_runner(model_id: str, device: str, precision: str, memory: str) -> Runner:
    return _load(model_id, device, precision, memory)


def get_runner(model_id: str, device: str, precision: str = "auto", memory: str = "") -> Runner:
    """One loaded model per id, device (or SPREAD, under the `memory` budgets) and precision, shared by every
    session and never mutated. The shipped models stay loaded on one device; of the custom folders and hub ids, and
    of the spread models, the MAX_CUSTOM_MODELS used last (a server must not keep every folder or budget anyone
    typed). A model trained or uploaded in this session is its own (ui/session_models.py), on the device it was made
    on. ValueError with a clear message for a model that cannot be loaded."""
    own = session_runner(model_id)
    if own is not None:
        return own
    if device != SPREAD:
        memory = ""  # budgets mean nothing on one device: one cache entry, whatever the box holds
    cached = _named_runner if model_id in list_model_ids() and device not in (SPREAD, *NDIF_DEVICES) else \
        _custom_runner
    with using_key(typed_key()):  # NDIF's: this session's key, for this load only
        return readable_failures(f"Loading {model_id}", lambda: cached(model_id, device, precision, memory))


def trace_for(request: RunRequest, hooks: tuple[str, ...] = PATTERNS, causal: CausalMode | None = None,
              pad_to: int = 0, blocked: tuple[tuple[int, int], ...] = (), ablated: tuple[Head, ...] = (),
              ablation: AblationMode = "zero", summarised: bool = False) -> tuple[Trace, bool]:
    """The trace of `request` capturing `hooks`, under another causal choice, extra masks or ablated heads if
    given, from the shared cache (computed once). `summarised`: every attention site reduced in the run, for the
    views of the whole text (the frame's run: the Overview and Attention pages read it; ui/site_summary.py). Returns
    (trace, kept): kept is False when it was too large for the budget (it will be computed again)."""
    runner = runner_of(request)
    options = request.options(hooks, causal, pad_to, blocked, ablated, ablation)
    if summarised:
        options = replace(options, summarised=True)
    key = (request, options, *key_identity(request.device))  # a run sent to NDIF: its key's, too (ui/ndif_runs.py)
    ndif_key = typed_key()  # NDIF's key: this session's, handed to this run only

    def compute() -> Trace:
        with using_key(ndif_key):
            return runner.run(request.text, request.target, options)

    def wait() -> tuple[Trace, bool]:
        return stoppable(key, lambda: cached_trace(key, compute)) if request.device == NDIF else \
            cached_trace(key, compute)

    return readable_failures(f"Running {request.model_id}", wait)


def readable_failures(what: str, work: Callable[[], T]) -> T:
    """`work()`, with any exception other than a UserError (a bug, a broken folder, a ValueError of numpy's …)
    logged with its traceback and raised again as a UserError a person can read (Streamlit's own stop and rerun
    signals are not Exceptions: they pass)."""
    try:
        return work()
    except UserError:
        raise
    except Exception as error:
        LOG.exception("%s failed", what)
        if isinstance(error, MemoryError) or is_out_of_memory(error) or "can't allocate memory" in str(error):
            raise UserError(f"{what} ran out of memory. Try a shorter text, or another model; the server "
                            "has let go of that run and keeps working.") from error
        raise UserError(f"Something went wrong: {what} failed ({type(error).__name__}); the details are in the "
                        "server's log. Try another text or model: the app keeps working.") from error
