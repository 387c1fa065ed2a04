"""The masks a trace keeps (model/core/trace/kept_masks.py): equal to the masks the run applied, a causal one held as
its diagonals (q_len + k_len - 1 bytes, not q_len x k_len), shared by every layer's pattern source and kept so when
the trace is written to a file and read back."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.kept_masks import compact
from attention_atlas.model.core.trace.trace import Trace, distinct_nbytes
from attention_atlas.model.registry import load_runner


def _window(n: int, width: int) -> np.ndarray:
    positions = np.arange(n)
    offset = positions[:, None] - positions[None, :]  # (n, n): query i - key k
    return (offset >= 0) & (offset < width)


DIAGONAL = {  # whether query i sees key k depends on i - k alone
    "causal": np.tril(np.ones((6, 6), bool)),
    "every key seen": np.ones((5, 5), bool),
    "a sliding window": _window(7, 3),
    "the previous key blocked": np.tril(np.ones((5, 5), bool)) & ~np.eye(5, k=-1, dtype=bool),
    "queries after a prompt": np.tril(np.ones((3, 6), bool), 3),  # 3 queries, the last 3 of 6 positions
    "every key hidden": np.zeros((4, 4), bool),
}
OTHER = {
    "padded on the left": np.tril(np.ones((5, 5), bool)) & (np.arange(5) >= 2),
    "one pair blocked": np.tril(np.ones((5, 5), bool)) & (np.arange(25).reshape(5, 5) != 16),  # query 3, key 1
    "one query": np.array([[True, True, False]]),
}


@pytest.mark.parametrize("name", DIAGONAL)
def test_a_mask_whose_diagonals_are_constant_is_kept_as_them(name: str) -> None:
    mask = DIAGONAL[name]
    kept = compact(mask)
    np.testing.assert_array_equal(kept, mask)
    assert distinct_nbytes([kept]) == sum(mask.shape) - 1  # not mask.size
    assert not kept.flags.writeable  # its rows overlap: a write would change others
    rows = kept[1:3]  # what a block of query rows reads, contiguous for a C kernel or torch
    np.testing.assert_array_equal(np.ascontiguousarray(rows), mask[1:3])
    np.testing.assert_array_equal(~kept, ~mask)


@pytest.mark.parametrize("name", OTHER)
def test_any_other_mask_is_kept_whole(name: str) -> None:
    mask = OTHER[name]
    kept = compact(mask)
    np.testing.assert_array_equal(kept, mask)
    assert kept.flags.c_contiguous and distinct_nbytes([kept]) == mask.size


@pytest.fixture(scope="module")
def trace() -> Trace:
    """SmolLM2 reading 40-odd tokens under its causal mask, every layer's pattern kept as its source."""
    runner = load_runner("smollm2")
    text = "The quick brown fox jumps over the lazy dog. " * 4
    return runner.run(text, options=RunOptions(hooks=("*.hook_pattern",)))


def _patterns_equal_with_the_whole_mask(trace: Trace) -> None:
    mask = trace.masks["decoder.attn"]
    for source in trace.pattern_sources.values():
        whole = replace(source, allowed=np.array(mask))  # the (n, n) bools, contiguous and writeable
        np.testing.assert_array_equal(source.pattern(dtype=np.float32), whole.pattern(dtype=np.float32))


def test_a_causal_trace_holds_its_mask_once_as_its_diagonals(trace: Trace) -> None:
    n = len(trace.ids)
    mask = trace.masks["decoder.attn"]
    np.testing.assert_array_equal(mask, np.tril(np.ones((n, n), bool)))
    assert distinct_nbytes([mask]) == 2 * n - 1
    assert all(source.allowed is mask for source in trace.pattern_sources.values())
    held = distinct_nbytes([a for source in trace.pattern_sources.values() for a in (source.query, source.key)])
    outputs = distinct_nbytes(list(trace.outputs.values()))
    assert trace.nbytes == held + outputs + 2 * n - 1  # queries, keys, outputs, the mask's diagonals: nothing else
    _patterns_equal_with_the_whole_mask(trace)


def test_a_trace_read_from_its_file_holds_its_mask_as_the_run_did(trace: Trace) -> None:
    written = io.BytesIO()
    trace.save(written)
    written.seek(0)
    read = Trace.load(written)
    mask = read.masks["decoder.attn"]
    np.testing.assert_array_equal(mask, trace.masks["decoder.attn"])
    assert distinct_nbytes([mask]) == 2 * len(read.ids) - 1  # the file's (n, n) bools, compacted once read
    assert all(source.allowed is mask for source in read.pattern_sources.values())  # not a copy a layer
    _patterns_equal_with_the_whole_mask(read)
    for name, source in read.pattern_sources.items():
        np.testing.assert_array_equal(source.pattern(), trace.pattern_sources[name].pattern())


def test_the_file_holds_the_mask_once_and_reads_one_written_with_a_mask_a_layer(trace: Trace) -> None:
    """Each layer's source takes its site's mask (`mask:decoder.attn`), written once; queries and keys are stored as
    they are, the mask deflated; a file of the first format, with every layer's mask of its own, reads the same."""
    written = io.BytesIO()
    trace.save(written)
    members = {member.filename: member for member in zipfile.ZipFile(written).infolist()}
    assert not [name for name in members if name.endswith(":allowed.npy")]
    query = next(name for name in members if name.endswith(":query.npy"))
    assert members[query].compress_type == zipfile.ZIP_STORED
    assert members["mask:decoder.attn.npy"].compress_type == zipfile.ZIP_DEFLATED
    written.seek(0)
    arrays = dict(np.load(written))
    whole = np.array(trace.masks["decoder.attn"])
    first = io.BytesIO()
    np.savez_compressed(first, **{**arrays, "format": np.array(1)},
                        **{f"source:{name}:allowed": whole for name in trace.pattern_sources})
    first.seek(0)
    read = Trace.load(first)
    for name, source in read.pattern_sources.items():
        np.testing.assert_array_equal(source.pattern(), trace.pattern_sources[name].pattern())
    assert all(source.allowed is read.masks["decoder.attn"] for source in read.pattern_sources.values())
