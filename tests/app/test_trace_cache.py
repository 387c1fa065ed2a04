"""The app's side of the cache: the budget from the environment, at most MAX_RUNS model runs at once, runs that go on
when their script is stopped, and runs nobody waits for that stop."""

import contextlib
import gc
import threading
import time
import weakref

import numpy as np
import pytest
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from attention_atlas.ui import run_scheduler, trace_cache
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE, DEFAULT_BUDGET_MB, budget_bytes, cached_trace


def test_budget_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(BUDGET_VARIABLE, raising=False)
    assert budget_bytes() == DEFAULT_BUDGET_MB * 2**20
    monkeypatch.setenv(BUDGET_VARIABLE, "1.5")
    assert budget_bytes() == 3 * 2**19
    monkeypatch.setenv(BUDGET_VARIABLE, "lots")
    with pytest.raises(ValueError, match=f"{BUDGET_VARIABLE} must be a number of megabytes"):
        budget_bytes()


def test_at_most_max_runs_run_at_once(monkeypatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "1")
    entered, go, lock = threading.Semaphore(0), threading.Event(), threading.Lock()
    running, most = [0], [0]

    def compute():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        entered.release()
        go.wait(30)
        with lock:
            running[0] -= 1
        return np.zeros(1)  # stands in for a trace: the cache needs only its size

    runs = run_scheduler.MAX_RUNS + 2
    threads = [threading.Thread(target=cached_trace, args=(("bounded runs", i), compute)) for i in range(runs)]
    for thread in threads:
        thread.start()
    assert all(entered.acquire(timeout=30) for _ in range(run_scheduler.MAX_RUNS))
    assert not entered.acquire(timeout=0.5)  # the others wait for a slot
    go.set()
    for thread in threads:
        thread.join(30)
    assert most[0] == run_scheduler.MAX_RUNS


class _Stopped(BaseException):
    """As Streamlit's StopException and RerunException, raised in a script's thread when its session asks for another
    run."""


DATE = "14 feb 1999"


def test_a_run_goes_on_and_is_cached_when_the_script_waiting_for_it_is_stopped(monkeypatch) -> None:
    """The run computes in a worker; the waiting script draws its progress (layers passed of layers kept) and may be
    stopped there (the person opened another page): the run finishes anyway and the next request finds it cached."""
    monkeypatch.setenv(BUDGET_VARIABLE, "1")
    monkeypatch.setattr(run_scheduler, "PROGRESS_AFTER_S", 0.0)
    halfway, finish = threading.Event(), threading.Event()
    drawn: list[tuple[int, int]] = []

    runner = load_runner("toy-date")
    patterns = RunOptions(hooks=("*.hook_pattern",))  # toy-date: 2 layers of 3 sites (encoder, decoder, cross)

    def compute():  # a real run (its capture reports each layer), then a wait: the script draws meanwhile
        trace = runner.run(DATE, options=patterns)
        halfway.set()
        finish.wait(30)
        return trace

    @contextlib.contextmanager
    def stopping_bar():
        def draw(passed: int, layers: int) -> None:
            drawn.append((passed, layers))
            raise _Stopped

        yield draw

    monkeypatch.setattr(trace_cache, "layer_bar", stopping_bar)
    with pytest.raises(_Stopped):
        cached_trace(("stopped script",), compute)
    assert halfway.is_set() and len(drawn) == 1  # drawn from the worker's reports, then stopped
    passed, layers = drawn[0]
    assert layers == 6 and 1 <= passed <= 6
    finish.set()
    trace, kept = cached_trace(("stopped script",), lambda: pytest.fail("computed twice"))
    assert kept and trace.tokens


def test_a_run_nobody_waits_for_stops_at_its_next_layer_and_frees_its_slot(monkeypatch) -> None:
    """The person changed the text during a long run: once no script has waited for it for ABANDON_AFTER_S, the
    run stops at its next attention layer, its run slot is free again, and a later request runs it anew."""
    monkeypatch.setenv(BUDGET_VARIABLE, "1")
    monkeypatch.setattr(run_scheduler, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(run_scheduler, "ABANDON_AFTER_S", 0.2)
    stopped, outcome, held = threading.Event(), [], []
    runner = load_runner("toy-date")
    patterns = RunOptions(hooks=("*.hook_pattern",))

    def compute():  # two passes: the script is stopped while drawing the first; the second finds nobody waiting
        runner.run(DATE, options=patterns)
        stopped.wait(30)
        time.sleep(0.4)
        during = torch.zeros(4)  # stands in for the forward pass's tensors, held by the frames the exception crosses
        held.append(weakref.ref(during))
        try:
            return runner.run(DATE, options=patterns)
        except run_scheduler.RunAbandoned:
            outcome.append("abandoned")
            raise

    @contextlib.contextmanager
    def stopping_bar():
        def draw(passed: int, layers: int) -> None:
            stopped.set()
            raise _Stopped

        yield draw

    monkeypatch.setattr(trace_cache, "layer_bar", stopping_bar)
    gc.disable()  # what the abandoned run held must go without a collection (a traceback's cycle would keep it)
    try:
        with pytest.raises(_Stopped):
            cached_trace(("abandoned run",), compute)
        slots = run_scheduler.run_slots()
        deadline = time.monotonic() + 30
        while not outcome and time.monotonic() < deadline:
            time.sleep(0.05)
        assert outcome == ["abandoned"]
        assert all(slots.acquire(timeout=5) for _ in range(run_scheduler.MAX_RUNS))  # every slot free again
        assert held[0]() is None
    finally:
        gc.enable()
    for _ in range(run_scheduler.MAX_RUNS):
        slots.release()
    monkeypatch.setattr(run_scheduler, "PROGRESS_AFTER_S", 60.0)  # a quick run: the stopping bar is not drawn
    trace, kept = cached_trace(("abandoned run",), lambda: runner.run(DATE, options=patterns))
    assert kept and trace.tokens
