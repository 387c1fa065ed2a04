"""Model runs in the server: at most MAX_RUNS at once, computed in worker threads while the scripts that asked wait
and draw how far the run is, with a button that stops it; a run no script waits for any more is abandoned at its next
report (an attention layer, or a block of a summarised layer's rows), at once where a person stopped it."""

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
        self._stopped: set[tuple] = set()  # keys in flight that a person stopped (`stop`)

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

    def stop(self, key: tuple) -> None:
        """A person stopped the run of `key`: abandoned as soon as no script waits for it (another session waiting
        for the same run keeps it going)."""
        with self._lock:
            if key in self._running:
                self._stopped.add(key)

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
                self._stopped.discard(key)

    def abandoned(self, key: tuple) -> bool:
        """Whether no script has waited for the run of `key` for ABANDON_AFTER_S, or none waits for it since a
        person stopped it."""
        with self._lock:
            since, stopped = self._unwatched_since.get(key), key in self._stopped
        return since is not None and (stopped or time.monotonic() - since >= ABANDON_AFTER_S)


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
        self.state: tuple[float, int] = (0, 0)  # (layers passed, with the share of the layer under way; layers
        # kept): one tuple, replaced whole
        self.words = ""  # where a run on NDIF is ("NDIF: queued (12 s)", model/ndif/status.py), told from its worker
        self.abandoned = abandoned

    def report(self, passed: float, layers: int) -> None:
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


def progress_words(passed: float, layers: int) -> str:
    """"Attention layer 3 of 4": the layer under way (the last, once every layer is passed)."""
    return f"Attention layer {min(int(passed) + 1, layers)} of {layers}"


@contextlib.contextmanager
def layer_bar() -> Iterator[Callable[[float, int], None]]:
    """draw(passed, layers): a progress bar "Attention layer 12 of 30", made when first drawn and gone at the end;
    draw(0, 0, words): where a run on NDIF is, in words."""
    bar = None

    def draw(passed: float, layers: int, words: str = "") -> None:
        nonlocal bar
        bar = st.empty() if bar is None else bar
        bar.progress(min(passed / layers, 1.0) if layers else 0.0, text=words or progress_words(passed, layers))

    try:
        yield draw
    finally:
        if bar is not None:
            bar.empty()


STOPPED = "runs_stopped"  # session state: {the key of a run a person stopped: where it was, in words}, the last
MOST_STOPS = 4  # STOPPED remembers at most this many (a key holds the text)


def stop_run(key: tuple, progress: RunProgress, waiters: Waiters) -> None:
    """A person stopped the run of `key` (`stop_button`'s click, before the script runs again): the session remembers
    it (`STOPPED`: ui/trace_cache.py then says so instead of running it again) and where it was, and `waiters` end
    it at its next report once no script waits for it."""
    stops = st.session_state.setdefault(STOPPED, {})
    stops[key] = progress_words(*progress.state) if progress.state[1] else ""
    for old in list(stops)[:-MOST_STOPS]:
        del stops[old]
    waiters.stop(key)


@contextlib.contextmanager
def stop_button(key: tuple, progress: RunProgress, waiters: Waiters
                ) -> Iterator[Callable[[Callable[..., None]], Callable[..., None]]]:
    """stoppable(draw): `draw` that also shows, under what it first draws, a button that stops the run of `key`
    (`stop_run`), gone at the end. Its click reruns the script, which stops the one waiting here."""
    holder = None

    def stoppable(draw: Callable[..., None]) -> Callable[..., None]:
        def drawn(*args: object) -> None:
            nonlocal holder
            draw(*args)
            if holder is None:
                holder = st.empty()
                holder.button("Stop the run", key=f"run_stop_{abs(hash(key))}", icon=":material/stop:",
                              on_click=stop_run, args=(key, progress, waiters),
                              help="Ends the run at its next block of rows; the text stays as it is.")
        return drawn

    try:
        yield stoppable
    finally:
        if holder is not None:
            holder.empty()
