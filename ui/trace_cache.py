"""The server's one cache of traces and of what pages derive from them, bounded in bytes (model/core/byte_cache.py).

Every session shares it. Its budget is `ATTENTION_ATLAS_CACHE_MB` megabytes (MiB), 2,560 by default, chosen
for a 24 GB machine whose server should stay under about 8 GB: the process with MiniLM and SmolLM2 loaded
takes 1.2 GB, and at most MAX_RUNS run at once. A 2,048-token SmolLM2 trace of the frame's run holds 188 MiB
(what its patterns are computed from, model/core/patterns.py), a 512-token MiniLM one 10.5 MiB: the default
holds about 13 of the former or 240 of the latter, with their derived values.

An evicted trace (or one not kept) is freed only once nothing else holds it. Earlier reruns' page namespaces
are reference cycles (functions <-> module globals) that hold their `trace`, and Streamlit no longer collects
garbage after every rerun (.streamlit/config.toml, postScriptGC): so after an eviction, or a run too large to
keep, a full collection. Measured without it: RSS grew by every evicted 2,048-token trace (1.1 GB each).
After each run, the C allocator's free pages go back to the system (glibc's malloc_trim).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import streamlit as st

from model.core.byte_cache import ByteCache
from model.core.capture import reporting_progress
from model.core.trace import Trace

T = TypeVar("T")
BUDGET_VARIABLE = "ATTENTION_ATLAS_CACHE_MB"
DEFAULT_BUDGET_MB = 2560
MAX_RUNS = 2  # model runs at once in the server; more wait (2 cores: more would not finish sooner anyway)
PROGRESS_AFTER_S = 1.0  # a run that has taken this long shows how many attention layers it has passed
_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform == "linux" else None  # glibc's


def budget_bytes() -> int:
    """The cache budget from ATTENTION_ATLAS_CACHE_MB (MiB, may be fractional), else the default."""
    raw = os.environ.get(BUDGET_VARIABLE, "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_BUDGET_MB
    except ValueError:
        raise ValueError(f"{BUDGET_VARIABLE} must be a number of megabytes, not {raw!r}") from None
    return int(megabytes * 2**20)


@st.cache_resource(max_entries=1, show_spinner=False)
def shared_cache(budget: int) -> ByteCache:
    """One cache per server process (a new budget replaces it)."""
    return ByteCache(budget)


@st.cache_resource(show_spinner=False)
def run_slots() -> threading.BoundedSemaphore:
    """MAX_RUNS slots for model runs, shared by every session."""
    return threading.BoundedSemaphore(MAX_RUNS)


def cached_trace(key: tuple, compute: Callable[[], Trace]) -> tuple[Trace, bool]:
    """The trace of `key` (plain values: model, text, options...), computed once if not cached.
    Returns (trace, kept): kept is False for a trace larger than the whole budget, which is not cached."""
    ran = False

    def run() -> Trace:
        nonlocal ran
        with run_slots():
            ran = True
            return compute()

    cache = shared_cache(budget_bytes())
    evictions = cache.evictions
    with st.spinner("Running the model…"), layer_progress():  # the spinner: only after half a second
        trace, kept = cache.get_or_compute(key, run)
    if not kept or cache.evictions != evictions:
        gc.collect()  # the traces let go of may still be held by garbage cycles (module docstring)
    if ran:
        release_free_memory()
    return trace, kept


@contextlib.contextmanager
def layer_progress() -> Iterator[None]:
    """A progress bar of the attention layers a run on this thread has passed, drawn once the run has taken
    PROGRESS_AFTER_S, gone when it ends. Drawing it is also where Streamlit stops a run whose session asked for
    another (the person changed the text): the stale run ends within a layer instead of holding a run slot."""
    started = time.monotonic()
    bar = None  # made only when first drawn: a quick run (or a cached trace) adds no element to the page

    def report(passed: int, layers: int) -> None:
        nonlocal bar
        if time.monotonic() - started >= PROGRESS_AFTER_S:
            bar = st.empty() if bar is None else bar
            bar.progress(passed / layers, text=f"Attention layer {passed} of {layers}")

    try:
        with reporting_progress(report):
            yield
    finally:
        if bar is not None:
            bar.empty()


def per_trace(trace: Trace, name: tuple | str, compute: Callable[[], T]) -> T:
    """A value derived from `trace` (a thumbnail image, a table...), computed once and kept with the trace:
    counted in its bytes and evicted with it. Computed every time for a trace that was not kept."""
    cache = shared_cache(budget_bytes())
    evictions = cache.evictions
    value = cache.derived(trace, name, compute)
    if cache.evictions != evictions:
        gc.collect()
    return value


def release_free_memory() -> None:
    """Give the C allocator's free pages back to the system (after a model run, and after every script run: a
    page's scratch, e.g. a site's summary, is freed into the arena of the session's thread, which keeps it). After
    a 2,048-token SmolLM2 run glibc kept 0.4 to 0.6 GB of its scratch; malloc_trim returns it in about 30 ms."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)

