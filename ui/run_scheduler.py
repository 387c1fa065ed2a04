"""Model runs in the server: at most MAX_RUNS at once, computed in worker threads while the scripts that asked wait
and draw how far the run is; a run no script waits for any more is abandoned at its next attention layer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import streamlit as st

T = TypeVar("T")
MAX_RUNS = 2  # model runs at once in the server; more wait (2 cores: more would not finish sooner anyway)
RUN_WORKERS = 16  # threads that compute traces (runs waiting for a slot, or for another session's same run, wait
# in them too)
PROGRESS_AFTER_S = 1.0  # a run that has taken this long shows how many attention layers it has passed
ABANDON_AFTER_S = 5.0  # a run no script has waited for this long stops at its next attention layer (the person
# changed the text): its slot goes to the runs people wait for. A page change asks for the same run again at once.
POLL_S = 0.2  # how often a waiting script looks at its run's progress


@st.cache_resource(show_spinner=False)
def run_slots() -> threading.BoundedSemaphore:
    """MAX_RUNS slots for model runs, shared by every session."""
    return threading.BoundedSemaphore(MAX_RUNS)


class RunAbandoned(Exception):
    """Raised in a run's worker when no script has waited for the run for ABANDON_AFTER_S."""


class Waiters:
    """How many scripts wait for each run in flight, and since when none has: such a run is abandoned once
    ABANDON_AFTER_S has passed with none (`abandoned`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple, int] = {}  # key -> scripts waiting for its run
        self._running: set[tuple] = set()  # keys whose run is in flight
        self._unwatched_since: dict[tuple, float] = {}  # key in flight -> when its last waiting script left

    @contextlib.contextmanager
    def waiting(self, key: tuple) -> Iterator[None]:
        """While open, a script waits for the run of `key`."""
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            self._unwatched_since.pop(key, None)
        try:
            yield
        finally:
            with self._lock:
                self._counts[key] -= 1
                if not self._counts[key]:
                    del self._counts[key]
                    if key in self._running:
                        self._unwatched_since[key] = time.monotonic()

    @contextlib.contextmanager
    def running(self, key: tuple) -> Iterator[None]:
        """While open, the run of `key` is in flight."""
        with self._lock:
            self._running.add(key)
            if key not in self._counts:  # its scripts left before the run began
                self._unwatched_since.setdefault(key, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._running.discard(key)
                self._unwatched_since.pop(key, None)

    def abandoned(self, key: tuple) -> bool:
        """Whether no script has waited for the run of `key` for ABANDON_AFTER_S."""
        with self._lock:
            since = self._unwatched_since.get(key)
        return since is not None and time.monotonic() - since >= ABANDON_AFTER_S


@st.cache_resource(show_spinner=False)
def run_waiters() -> Waiters:
    """The scripts waiting for runs, shared by every session."""
    return Waiters()


@st.cache_resource(show_spinner=False)
def run_workers() -> ThreadPoolExecutor:
    """The threads that compute traces, shared by every session. A run goes on when the script that asked for it is
    stopped (its session asked for another run: the person opened another page, or changed the text while the bar
    was drawn): a page that asks for the same trace again waits for that run instead of starting over. A run that
    no script has waited for in ABANDON_AFTER_S stops at its next attention layer (`Waiters`). RUN_WORKERS bounds
    the threads, MAX_RUNS the runs among them."""
    return ThreadPoolExecutor(RUN_WORKERS, thread_name_prefix="atlas-run")


class RunProgress:
    """The attention layers a run in a worker has passed, written there, read by the script waiting for it; the
    run stops there (RunAbandoned) once `abandoned()` says nobody waits for it any more."""

    def __init__(self, abandoned: Callable[[], bool]) -> None:
        self.state = (0, 0)  # (layers passed, layers kept): one tuple, replaced whole
        self.words = ""  # where a run on NDIF is ("NDIF: queued (12 s)", model/ndif/status.py), told from its worker
        self.abandoned = abandoned

    def report(self, passed: int, layers: int) -> None:
        self.state = (passed, layers)
        if self.abandoned():
            raise RunAbandoned

    def tell(self, words: str) -> None:
        """A run's words, told while it waits for NDIF: the waiting stops there once nobody waits for the run."""
        self.words = words
        if self.abandoned():
            raise RunAbandoned


def await_run(future: Future[T], progress: RunProgress, draw: Callable[..., None]) -> T:
    """The result of `future`, calling draw(layers passed, layers kept) every POLL_S once it has taken
    PROGRESS_AFTER_S (a quick run, or a cached trace, draws nothing), or draw(0, 0, words) while a run waits for
    NDIF. What `draw` raises (Streamlit stopping this script) leaves the run going on in its worker."""
    started = time.monotonic()
    while True:
        try:
            return future.result(timeout=POLL_S)
        except TimeoutError:
            passed, layers = progress.state
            if time.monotonic() - started < PROGRESS_AFTER_S:
                continue
            if progress.words and not layers:  # a run on NDIF, waiting for its result
                draw(0, 0, progress.words)
            elif layers:
                draw(passed, layers)


@contextlib.contextmanager
def layer_bar() -> Iterator[Callable[[int, int], None]]:
    """draw(passed, layers): a progress bar "Attention layer 12 of 30", made when first drawn and gone at the end;
    draw(0, 0, words): where a run on NDIF is, in words."""
    bar = None

    def draw(passed: int, layers: int, words: str = "") -> None:
        nonlocal bar
        bar = st.empty() if bar is None else bar
        bar.progress(passed / layers if layers else 0.0, text=words or f"Attention layer {passed} of {layers}")

    try:
        yield draw
    finally:
        if bar is not None:
            bar.empty()
