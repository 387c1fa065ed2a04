"""The byte-bounded cache: LRU eviction by bytes, derived values kept and evicted with their entry, values too
large to keep, one computation per key across threads; and the sizes it is given (Trace.nbytes, frames)."""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attention_atlas import load_trace
from attention_atlas.model.core.bounded_cache import ByteCache, nbytes
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.file_fields import PLAIN
from attention_atlas.model.core.trace.trace import distinct_nbytes
from attention_atlas.model.registry import load_runner


def _array(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.uint8)  # n bytes


def test_least_recently_used_is_evicted_first_and_bytes_add_up() -> None:
    cache = ByteCache(budget=100)
    for key in "abc":
        value, kept = cache.get_or_compute(key, lambda: _array(30))
        assert kept and value.nbytes == 30
    assert cache.nbytes == 90
    cache.get_or_compute("a", lambda: pytest.fail("a is cached"))  # a is now the most recent
    cache.get_or_compute("d", lambda: _array(30))  # 120 > 100: b, the least recent, goes
    assert [k in cache for k in "abcd"] == [True, False, True, True]
    assert cache.nbytes == 90
    cache.get_or_compute("e", lambda: _array(70))  # c and a go
    assert [k in cache for k in "abcde"] == [False, False, False, True, True]
    assert (len(cache), cache.nbytes, cache.evictions) == (2, 100, 3)


def test_derived_values_count_in_their_entry_and_go_with_it() -> None:
    cache = ByteCache(budget=100)
    parent, _ = cache.get_or_compute("p", lambda: _array(40))
    other, _ = cache.get_or_compute("q", lambda: _array(20))
    image = cache.derived(parent, "image", lambda: _array(10))
    assert cache.derived(parent, "image", lambda: pytest.fail("stored")) is image
    assert cache.nbytes == 70
    cache.derived(parent, "table", lambda: _array(30))  # 100: the parent is now the most recent, q stays
    assert cache.nbytes == 100 and "q" in cache
    cache.derived(other, "big", lambda: _array(10))  # q (now most recent) stays; p goes with both derived
    assert "p" not in cache and "q" in cache
    assert cache.nbytes == 30
    calls = []
    for _ in range(2):  # p is gone: computed, returned, not stored
        cache.derived(parent, "image", lambda: calls.append(1) or _array(10))
    assert len(calls) == 2 and cache.nbytes == 30


def test_derived_value_that_does_not_fit_beside_its_parent_is_not_stored() -> None:
    cache = ByteCache(budget=100)
    parent, _ = cache.get_or_compute("p", lambda: _array(80))
    value = cache.derived(parent, "big", lambda: _array(30))
    assert value.nbytes == 30
    assert cache.nbytes == 80 and "p" in cache


def test_one_object_under_two_keys_keeps_its_derived_values_with_the_later_key() -> None:
    cache = ByteCache(budget=100)
    shared = _array(10)
    cache.get_or_compute("x", lambda: shared)
    cache.get_or_compute("y", lambda: shared)
    cache.get_or_compute("z", lambda: _array(85))  # x goes
    cache.derived(shared, "image", lambda: _array(5))
    assert "y" in cache and cache.nbytes == 100  # stored with y


def test_a_value_larger_than_the_budget_is_returned_and_not_kept() -> None:
    cache = ByteCache(budget=100)
    cache.get_or_compute("small", lambda: _array(50))
    value, kept = cache.get_or_compute("huge", lambda: _array(101))
    assert value.nbytes == 101 and not kept
    assert "huge" not in cache and "small" in cache and cache.nbytes == 50  # nothing evicted for it
    _, kept_again = cache.get_or_compute("huge", lambda: _array(101))  # computed again
    assert not kept_again
    assert cache.derived(value, "image", lambda: _array(1)).nbytes == 1  # computed for an uncached parent


def test_one_computation_per_key_across_threads_and_keys_in_parallel() -> None:
    cache = ByteCache(budget=10_000)
    calls: dict[str, int] = {}
    both_running = threading.Barrier(2, timeout=10)  # "a" and "b" must be computing at the same time
    lock = threading.Lock()

    def compute(key: str) -> np.ndarray:
        with lock:
            calls[key] = calls.get(key, 0) + 1
        both_running.wait()
        return _array(10)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: cache.get_or_compute("ab"[i % 2], lambda: compute("ab"[i % 2])), range(16)))
    assert calls == {"a": 1, "b": 1}
    assert all(value is results[i % 2][0] for i, (value, kept) in enumerate(results))


def test_every_waiter_gets_the_error_and_nothing_is_cached() -> None:
    cache = ByteCache(budget=100)
    started, release = threading.Event(), threading.Event()

    def failing() -> np.ndarray:
        started.set()
        release.wait(10)
        raise ValueError("bad text")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.get_or_compute, "k", failing)
        started.wait(10)
        second = pool.submit(cache.get_or_compute, "k", lambda: pytest.fail("computed twice"))
        release.set()
        for future in (first, second):
            with pytest.raises(ValueError, match="bad text"):
                future.result()
    assert "k" not in cache
    assert cache.get_or_compute("k", lambda: _array(1))[1]  # a later request computes afresh


def test_sizes_of_arrays_and_frames() -> None:
    frame = pd.DataFrame({"x": np.zeros(10), "name": ["a" * 100] * 10})
    assert nbytes(np.zeros((3, 4), dtype=np.float16)) == 24
    assert nbytes(frame) == frame.memory_usage(deep=True).sum() > 1000  # the strings counted
    with pytest.raises(TypeError, match="cannot tell the size"):
        nbytes(object())


def test_trace_nbytes_is_the_sum_of_its_arrays(tmp_path: Path) -> None:
    trace = load_runner("toy-date").run("march 3 2021")  # every hook, and generation steps
    assert trace.steps and trace.captured and trace.outputs and trace.masks
    trace.save(tmp_path / "t.npz")
    metadata = PLAIN  # the run's description, not its arrays
    masks = list(trace.masks.values())  # held as their diagonals (model/core/trace/kept_masks.py), written whole
    assert distinct_nbytes(masks) == sum(sum(mask.shape) - 1 for mask in masks)
    with np.load(tmp_path / "t.npz") as arrays:
        held = [arrays[k].nbytes for k in arrays.files if k not in metadata and not k.startswith("mask:")]
        assert trace.nbytes == sum(held) + distinct_nbytes(masks)
    assert load_trace(tmp_path / "t.npz").nbytes == trace.nbytes


def test_trace_nbytes_counts_pattern_sources_and_their_shared_mask_once() -> None:
    """Patterns kept as sources cost their queries and keys; the mask every layer reads is counted once."""
    runner = load_runner("smollm2")
    trace = runner.run("The capital of France is", options=RunOptions(hooks=("*.hook_pattern",)))
    sources = trace.pattern_sources
    n, layers = len(trace.tokens), len(sources)
    assert layers == 30 and not trace.captured
    queries_and_keys = sum(s.query.nbytes + s.key.nbytes for s in sources.values())  # float32
    assert queries_and_keys == layers * (9 + 3) * n * 64 * 4
    shared_mask = trace.masks["decoder.attn"]  # the site's mask, which every layer's source holds
    assert all(s.allowed is shared_mask for s in sources.values())
    outputs = sum(v.nbytes for v in trace.outputs.values())
    assert trace.nbytes == queries_and_keys + 2 * n - 1 + outputs  # one causal mask's diagonals for every layer
    assert trace.attention["decoder.0.attn.hook_pattern"].nbytes == 9 * n * n * 2  # computed when read, not held


def test_the_size_of_a_tuple_of_plain_values_is_counted() -> None:
    from attention_atlas.model.core.bounded_cache import nbytes

    assert nbytes(("encoder.attn", 0, 2, 0.99)) > nbytes(("encoder.attn", 0)) > 0
    assert nbytes((np.zeros(1000, dtype=np.uint8),)) > 1000
