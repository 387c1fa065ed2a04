"""The server's one cache of traces and of what pages derive from them, bounded in bytes (model/core/bounded_cache.py).

Every session shares it. Its budget is `ATTENTION_ATLAS_CACHE_MB` megabytes (MiB), 2,560 by default, chosen
for a 24 GB machine whose server should stay under about 8 GB: the process with MiniLM and SmolLM2 loaded
takes 1.2 GB, and at most MAX_RUNS run at once (ui/run_scheduler.py). A 2,048-token SmolLM2 trace of the frame's
run holds 204 MiB (what its patterns are computed from, model/core/attention/source.py, and its summary), a 512-token
MiniLM one 18 MiB: the default holds about 12 of the former or 139 of the latter, with their derived values.

An evicted trace (or one not kept) is freed only once nothing else holds it. Earlier reruns' page namespaces
are reference cycles (functions <-> module globals) that hold their `trace`, and Streamlit no longer collects
garbage after every rerun (.streamlit/config.toml, postScriptGC): so after an eviction, or a run too large to
keep, a full collection. Measured without it: RSS grew by every evicted 2,048-token trace (1.1 GB each).
After each run, the C allocator's free pages go back to the system (glibc's malloc_trim).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from attention_atlas.model.core.bounded_cache import ByteCache, nbytes
from attention_atlas.model.core.capture.record import reporting_progress
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.ndif.fetched import fetch_allowance
from attention_atlas.model.ndif.status import following
from attention_atlas.ui.run_scheduler import (
    STOPPED,
    RunAbandoned,
    RunProgress,
    Waiters,
    await_run,
    layer_bar,
    run_slots,
    run_waiters,
    run_workers,
    stop_button,
)

T = TypeVar("T")
BUDGET_VARIABLE = "ATTENTION_ATLAS_CACHE_MB"
DEFAULT_BUDGET_MB = 2560
_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform == "linux" else None  # glibc's


def budget_bytes() -> int:
    """The cache budget from ATTENTION_ATLAS_CACHE_MB (MiB, may be fractional), else the default."""
    raw = os.environ.get(BUDGET_VARIABLE, "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_BUDGET_MB
    except ValueError:
        raise UserError(f"{BUDGET_VARIABLE} must be a number of megabytes, not {raw!r}") from None
    return int(megabytes * 2**20)


@st.cache_resource(max_entries=1, show_spinner=False)
def shared_cache(budget: int) -> ByteCache:
    """One cache per server process (a new budget replaces it)."""
    return ByteCache(budget, size_of=counted_bytes)


def counted_bytes(value: object) -> int:
    """What a cached value may hold: its bytes, and for a run summarised on NDIF the layers it may yet fetch."""
    return nbytes(value) + (fetch_allowance(value) if isinstance(value, Trace) else 0)


def cached_trace(key: tuple, compute: Callable[[], Trace]) -> tuple[Trace, bool]:
    """The trace of `key` (plain values: model, text, options...), computed once if not cached, in one of the
    server's run workers (`run_workers`) while this script waits and shows how far the run is (`layer_bar`).
    Returns (trace, kept): kept is False for a trace larger than the whole budget, which is not cached."""
    ran = False
    waiters = run_waiters()

    def run(progress: RunProgress) -> Trace:
        nonlocal ran
        with waiters.running(key), run_slots():
            if waiters.abandoned(key):  # while it waited for a slot
                raise RunAbandoned
            try:
                with reporting_progress(progress.report), following(progress.tell):
                    ran = True
                    return compute()
            except RunAbandoned:
                pass  # its traceback holds the forward pass's frames, and their tensors, in a cycle: not kept
            raise RunAbandoned

    cache = shared_cache(budget_bytes())
    evictions = cache.evictions
    stopped_here(key, key in cache)
    if key in cache:  # served here: a cached trace never waits behind runs queued for a worker
        trace, kept = _served_here(cache, key, run, waiters)
    else:
        trace, kept = _await_in_worker(cache, key, run, waiters)
    if not kept or cache.evictions != evictions:
        gc.collect()  # the traces let go of may still be held by garbage cycles (module docstring)
    if ran:
        release_free_memory()
    return trace, kept


def _served_here(cache: ByteCache, key: tuple, run: Callable[[RunProgress], Trace], waiters: Waiters
                 ) -> tuple[Trace, bool]:
    """cache.get_or_compute(key, ...) in this script's thread, counted as waiting (should the trace be evicted
    meanwhile, the run here is waited for: never abandoned); again if it met another session's run of the same key
    just as that run was abandoned."""
    while True:
        try:
            with waiters.waiting(key):
                return cache.get_or_compute(key, functools.partial(run, RunProgress(lambda: False)))
        except RunAbandoned:
            continue


def _await_in_worker(cache: ByteCache, key: tuple, run: Callable[[RunProgress], Trace], waiters: Waiters
                     ) -> tuple[Trace, bool]:
    """cache.get_or_compute(key, ...) in a run worker, this script waiting for it (and counted as waiting) and
    drawing its progress; run again if the run it found under way had just been abandoned."""
    while True:
        progress = RunProgress(lambda: waiters.abandoned(key))
        with waiters.waiting(key):
            future = run_workers().submit(cache.get_or_compute, key, functools.partial(run, progress))
            with st.spinner("Running the model…"), layer_bar() as draw, \
                    stop_button(key, progress, waiters) as stoppable:  # the spinner: only after half a second
                try:
                    return await_run(future, progress, stoppable(draw))
                except RunAbandoned:
                    continue


def stopped_here(key: tuple, cached: bool) -> None:
    """Where this session stopped the run of `key` (ui/run_scheduler.py `stop_button`) and it is not cached (it did
    not finish first): say so, offer to run it again, and stop the script."""
    stops = st.session_state.get(STOPPED, {})
    if key not in stops:
        return
    if cached:
        del stops[key]
        return
    where = f" at {stops[key][0].lower()}{stops[key][1:]}" if stops[key] else ""
    st.info(f"The run was stopped{where}. Change the text or the model, or run it again.", icon=":material/stop:")
    st.button("Run it again", key="run_again", icon=":material/play_arrow:", on_click=lambda: stops.pop(key, None))
    st.stop()


class _NotCached(Exception):
    """A lookup of a key the cache does not hold, with nothing to compute it from."""


def file_cached(key: tuple, read: Callable[[], Trace] | None = None) -> Trace | None:
    """A trace that was not run here (a trace file's) from the server's cache under `key`, so that the budget
    counts it and what pages derive from it (`per_trace`) is kept with it. Not cached: read by `read` (once, for
    every session that asks meanwhile) and kept while it fits; None where there is no `read`."""
    cache = shared_cache(budget_bytes())
    evictions = cache.evictions

    def missing() -> Trace:
        if read is None:
            raise _NotCached
        return read()

    try:
        trace = cache.get_or_compute(key, missing)[0]
    except _NotCached:
        return None
    if cache.evictions != evictions:
        gc.collect()  # the traces let go of may still be held by garbage cycles (module docstring)
    return trace


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

