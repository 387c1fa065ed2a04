"""Running the models for every page: loaded models shared by all sessions, and traces through the server's
byte-bounded cache (ui/trace_cache.py).

The frame (app.py) makes the run the sidebar asks for, capturing attention patterns only, and keeps its
`RunRequest` in the session. A page that needs more than patterns (scores, queries, activations...) or other
masks (a padding demo, blocked pairs) asks for its own run with `ui.page.trace_with`: the same request with
other hooks or options, cached under its own key in the same budget.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import streamlit as st

from model.core.devices import pick_device
from model.core.options import CausalMode, RunOptions
from model.core.runner import Runner
from model.core.trace import Trace
from model.registry import list_model_ids, load_runner
from ui.trace_cache import cached_trace

PATTERNS = ("*.hook_pattern",)  # what the frame's run captures: the Overview and Attention pages read no more
MAX_CUSTOM_MODELS = 2  # custom folders kept loaded at once (the named models are a fixed, small set)


@dataclass(frozen=True)
class RunRequest:
    """What the sidebar asks for: the model, where it runs, the text, the target (None: generate) and the
    causal choice. Plain values: part of every cache key."""

    model_id: str
    device: str
    text: str
    target: str | None
    causal: CausalMode

    def options(self, hooks: tuple[str, ...] = PATTERNS, causal: CausalMode | None = None, pad_to: int = 0,
                blocked: tuple[tuple[int, int], ...] = ()) -> RunOptions:
        """RunOptions capturing `hooks`, under the request's causal choice unless `causal` is given."""
        return RunOptions(hooks=hooks, causal=causal or self.causal, pad_to=pad_to, blocked=blocked)


@st.cache_resource(show_spinner=False)
def _loaded() -> weakref.WeakValueDictionary:
    """(model id, device) -> its runner, while some cache or session still holds it."""
    return weakref.WeakValueDictionary()


def is_loaded(model_id: str, device: str) -> bool:
    return (model_id, device) in _loaded()


def _load(model_id: str, device: str) -> Runner:
    runner = load_runner(model_id, device=pick_device(device))
    _loaded()[(model_id, device)] = runner
    return runner


@st.cache_resource(show_spinner="Loading the model… (SmolLM2's first load converts its weights: about 30 s)")
def _named_runner(model_id: str, device: str) -> Runner:
    return _load(model_id, device)


@st.cache_resource(show_spinner="Loading the model…", max_entries=MAX_CUSTOM_MODELS)
def _custom_runner(model_id: str, device: str) -> Runner:
    return _load(model_id, device)


def get_runner(model_id: str, device: str) -> Runner:
    """One loaded model per id and device, shared by every session and never mutated. The shipped models stay
    loaded; of the custom folders and hub ids, the MAX_CUSTOM_MODELS used last (a server must not keep every
    folder anyone typed). ValueError with a clear message for a model that cannot be loaded."""
    if model_id in list_model_ids():
        return _named_runner(model_id, device)
    return _custom_runner(model_id, device)


def trace_for(request: RunRequest, hooks: tuple[str, ...] = PATTERNS, causal: CausalMode | None = None,
              pad_to: int = 0, blocked: tuple[tuple[int, int], ...] = ()) -> tuple[Trace, bool]:
    """The trace of `request` capturing `hooks`, under another causal choice or extra masks if given, from the
    shared cache (computed once). Returns (trace, kept): kept is False when it was too large for the budget
    (it will be computed again)."""
    runner = get_runner(request.model_id, request.device)
    options = request.options(hooks, causal, pad_to, blocked)
    key = (request, options)
    return cached_trace(key, lambda: runner.run(request.text, request.target, options))
