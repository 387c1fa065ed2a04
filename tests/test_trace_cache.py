"""The app's side of the cache: the budget from the environment, and at most MAX_RUNS model runs at once."""

import threading

import numpy as np
import pytest

from ui import trace_cache
from ui.trace_cache import BUDGET_VARIABLE, DEFAULT_BUDGET_MB, budget_bytes, cached_trace


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

    runs = trace_cache.MAX_RUNS + 2
    threads = [threading.Thread(target=cached_trace, args=(("bounded runs", i), compute)) for i in range(runs)]
    for thread in threads:
        thread.start()
    assert all(entered.acquire(timeout=30) for _ in range(trace_cache.MAX_RUNS))
    assert not entered.acquire(timeout=0.5)  # the others wait for a slot
    go.set()
    for thread in threads:
        thread.join(30)
    assert most[0] == trace_cache.MAX_RUNS
