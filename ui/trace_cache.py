"""The server's one cache of traces and of what pages derive from them, bounded in bytes (model/byte_cache.py).

Every session shares it. Its budget is `ATTENTION_ATLAS_CACHE_MB` megabytes (MiB), 2,560 by default: on a
24 GB machine the server then stays under about 8 GB with SmolLM2 and MiniLM loaded (about 2 GB with
Streamlit and torch), two runs under way (a 2,048-token SmolLM2 run holds about 1.6 GB while it runs) and
the cache full. That holds two 2,048-token SmolLM2 traces (1,084 MiB each, attention patterns only) with
their derived values, or about 65 MiniLM traces of 512 tokens (37 MiB each); `python -m bench.server_memory`
measures it. At most MAX_RUNS models run at once: each long run holds its attention outside the budget.

An evicted trace (or one not kept) is freed only once nothing else holds it. Earlier reruns' page namespaces
are reference cycles (functions <-> module globals) that hold their `trace`, and Streamlit no longer collects
garbage after every rerun (.streamlit/config.toml, postScriptGC): so after an eviction, or a run too large to
keep, a full collection. Measured without it: RSS grew by every evicted 2,048-token trace (1.1 GB each).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from model.byte_cache import ByteCache
from model.tracing import Trace

T = TypeVar("T")
BUDGET_VARIABLE = "ATTENTION_ATLAS_CACHE_MB"
DEFAULT_BUDGET_MB = 2560
MAX_RUNS = 2  # model runs at once in the server; more wait (2 cores: more would not finish sooner anyway)


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

    def run() -> Trace:
        with run_slots():
            return compute()

    cache = shared_cache(budget_bytes())
    evictions = cache.evictions
    with st.spinner("Running the model…"):  # shown only if it takes over half a second
        trace, kept = cache.get_or_compute(key, run)
    if not kept or cache.evictions != evictions:
        gc.collect()  # the traces let go of may still be held by garbage cycles (module docstring)
    return trace, kept


def per_trace(trace: Trace, name: tuple | str, compute: Callable[[], T]) -> T:
    """A value derived from `trace` (a thumbnail image, a table...), computed once and kept with the trace:
    counted in its bytes and evicted with it. Computed every time for a trace that was not kept."""
    cache = shared_cache(budget_bytes())
    evictions = cache.evictions
    value = cache.derived(trace, name, compute)
    if cache.evictions != evictions:
        gc.collect()
    return value
