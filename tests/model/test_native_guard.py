"""The native kernel's guard (model/core/attention/native/guard.py, run_kernel's): every argument the C code reads,
writes or indexes with, checked before the call, a wrong one a ValueError with a sentence (never a read or a write
outside an array); and a working buffer the C code is not granted a MemoryError, not a crash."""

from __future__ import annotations

import ctypes
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.block_means import block_starts

HEADS, ROWS, WIDTH, D = 2, 4, 10, 8


def _never_called(*_arguments: object) -> int:
    raise AssertionError("the guard let these arguments through to the C code")


class _Stub:
    """A kernel whose calls fail the test: what the guard refuses never reaches it."""

    from_queries = staticmethod(_never_called)

    def __call__(self, *arguments: object) -> int:
        return _never_called(*arguments)


def _arguments(**changes: object) -> dict[str, object]:
    """run_kernel's arguments for a block of (HEADS, ROWS, WIDTH) scores made from queries, with `changes`."""
    good = {"scores": torch.zeros(HEADS, ROWS, WIDTH), "allowed": np.ones((ROWS, WIDTH), dtype=bool), "first": 0,
            "query0": 0, "positional": True, "floor_bits": -112.0,
            "thumb_starts": block_starts(WIDTH, 5).astype(np.int32), "thumb": torch.empty(HEADS, ROWS, 5),
            "roll_starts": block_starts(WIDTH, 2).astype(np.int32), "roll": torch.empty(ROWS, 2),
            "stats": torch.empty(HEADS, ROWS, 5), "queries": (torch.zeros(HEADS, ROWS, D), torch.zeros(1, D, WIDTH)),
            "values": (torch.zeros(1, WIDTH, 6), torch.empty(HEADS, ROWS, 6))}
    return good | changes


def _refused(**changes: object) -> None:
    with pytest.raises(ValueError, match=r"^attention_rows: .+\.$"):
        native.run_kernel(_Stub(), **_arguments(**changes))


def test_arguments_the_kernel_can_take_reach_it() -> None:
    """The guard lets good arguments through (to the stub, which fails the test), so its refusals below are of the
    one argument each changes."""
    with pytest.raises(AssertionError, match="let these arguments through"):
        native.run_kernel(_Stub(), **_arguments())
    with pytest.raises(AssertionError, match="let these arguments through"):
        native.run_kernel(_Stub(), **_arguments(queries=None, values=None, roll=None, roll_starts=None,
                                                allowed=torch.ones(ROWS, WIDTH + 3, dtype=torch.bool)[:, 1:],
                                                first=WIDTH, query0=2**40))


@pytest.mark.parametrize("scores", [torch.zeros(HEADS * ROWS, WIDTH), torch.zeros(HEADS, ROWS, WIDTH, 1),
                                    torch.zeros(HEADS, ROWS, WIDTH, dtype=torch.float64),
                                    torch.zeros(HEADS, WIDTH, ROWS).transpose(1, 2), torch.zeros(HEADS, ROWS, 0),
                                    torch.zeros(0, ROWS, WIDTH), np.zeros((HEADS, ROWS, WIDTH), np.float32)],
                         ids=["2-d", "4-d", "float64", "strided", "no-key", "no-head", "numpy"])
def test_scores_of_another_shape_type_or_layout_are_refused(scores) -> None:
    _refused(scores=scores)


@pytest.mark.parametrize("allowed", [np.ones(WIDTH, dtype=bool), np.ones((ROWS, WIDTH), dtype=np.uint8),
                                     np.ones((ROWS - 1, WIDTH), dtype=bool), np.ones((ROWS, WIDTH - 1), dtype=bool),
                                     np.ones((ROWS, WIDTH, 1), dtype=bool),
                                     torch.ones(ROWS, WIDTH, dtype=torch.bool, device="meta"), [[True] * WIDTH] * ROWS],
                         ids=["1-d", "uint8", "rows", "keys", "3-d", "not-cpu", "list"])
def test_a_mask_of_another_shape_or_type_is_refused(allowed) -> None:
    _refused(allowed=allowed)


@pytest.mark.parametrize(("first", "query0"), [(-1, 0), (WIDTH + 1, 0), (2.0, 0), (0, -1), (0, 2**63), (0, 1.5)],
                         ids=["first<0", "first>keys", "first-float", "query0<0", "query0-huge", "query0-float"])
def test_first_and_query0_out_of_range_are_refused(first, query0) -> None:
    """`first` is a count of keys every row sees (0 to the keys), `query0` the block's first query index (a negative
    one would make the C code read the key before a row)."""
    _refused(first=first, query0=query0)


@pytest.mark.parametrize("floor_bits", [-200.0, 0.5, float("nan"), "-112"])
def test_a_floor_outside_the_normal_floats_is_refused(floor_bits) -> None:
    _refused(floor_bits=floor_bits)


@pytest.mark.parametrize("starts", [np.array([0, 5, 10]), np.array([[0, 5, 10]], dtype=np.int32),
                                    np.array([0, 9, 5, 10], dtype=np.int32), np.array([2, 5, 10], dtype=np.int32),
                                    np.array([-3, 5, 10], dtype=np.int32), np.array([0, 5, 9], dtype=np.int32),
                                    np.array([10], dtype=np.int32), np.array([0, 0, 5, 5, 10, 10], dtype=np.int32)[::2],
                                    torch.tensor([0, 5, 10], dtype=torch.int32)],
                         ids=["int64", "2-d", "decreasing", "not-from-0", "negative", "short", "no-block", "strided",
                              "tensor"])
@pytest.mark.parametrize("which", ["thumb", "roll"])
def test_block_starts_that_are_no_blocks_of_the_keys_are_refused(starts, which) -> None:
    """Block starts are int32, contiguous, from 0, never decreasing, ending at the keys or after (the C code sums
    each block's keys with them)."""
    blocks = max(len(starts) - 1, 0) if starts.ndim == 1 else 2
    outputs = ({"thumb": torch.empty(HEADS, ROWS, blocks)} if which == "thumb" else {"roll": torch.empty(ROWS, blocks)})
    _refused(**{f"{which}_starts": starts}, **outputs)


@pytest.mark.parametrize("change", [{"thumb": torch.empty(HEADS, ROWS, 4)}, {"thumb": torch.empty(HEADS, ROWS, 5)[1:]},
                                    {"thumb": torch.empty(HEADS, 5, ROWS).transpose(1, 2)},
                                    {"stats": torch.empty(HEADS, ROWS, 4)},
                                    {"stats": torch.empty(HEADS, ROWS, 5, dtype=torch.float16)},
                                    {"roll": torch.empty(ROWS, 3)}, {"roll": torch.empty(2, ROWS).T},
                                    {"roll": None}, {"roll_starts": None}],
                         ids=["thumb-blocks", "thumb-heads", "thumb-strided", "stats-shape", "stats-float16",
                              "roll-blocks", "roll-strided", "roll-alone-starts", "roll-without-starts"])
def test_outputs_of_another_shape_type_or_layout_are_refused(change) -> None:
    _refused(**change)


def _keys(shape: tuple[int, ...], order: tuple[int, ...]) -> torch.Tensor:
    return torch.zeros(shape).permute(order)


@pytest.mark.parametrize("queries", [
    (torch.zeros(HEADS, ROWS), torch.zeros(1, ROWS, WIDTH)),  # 2-d: d would be read as ROWS
    (torch.zeros(HEADS, ROWS, D, 1), torch.zeros(1, 1, WIDTH)),
    (torch.zeros(HEADS, D, ROWS).transpose(1, 2), torch.zeros(1, D, WIDTH)),
    (torch.zeros(HEADS + 1, ROWS, D), torch.zeros(1, D, WIDTH)),
    (torch.zeros(HEADS, ROWS, 0), torch.zeros(1, 0, WIDTH)),
    (torch.zeros(HEADS, ROWS, D, dtype=torch.float64), torch.zeros(1, D, WIDTH)),
    (torch.zeros(HEADS, ROWS, D), torch.zeros(D, WIDTH)),
    (torch.zeros(HEADS, ROWS, D), torch.zeros(3, D, WIDTH)),  # 3 key heads for 2 heads
    (torch.zeros(HEADS, ROWS, D), torch.zeros(1, D + 1, WIDTH)),
    (torch.zeros(HEADS, ROWS, D), torch.zeros(1, D, WIDTH - 1)),
    (torch.zeros(HEADS, ROWS, D), _keys((1, WIDTH, D), (0, 2, 1))),  # keys as (key, d): a key row strided
    (torch.zeros(HEADS, ROWS, D), _keys((D, 2, WIDTH), (1, 0, 2))),  # the heads not d rows apart
    (torch.zeros(HEADS, ROWS, D), torch.zeros(1, D, WIDTH, device="meta")),
], ids=["query-2d", "query-4d", "query-strided", "query-heads", "d-0", "query-float64", "keys-2d", "keys-heads",
        "keys-d", "keys-few", "keys-transposed", "keys-heads-apart", "keys-not-cpu"])
def test_queries_and_keys_the_kernel_cannot_read_are_refused(queries) -> None:
    _refused(queries=queries, values=None)


def test_queries_for_a_kernel_without_avx512_are_refused() -> None:
    with pytest.raises(ValueError, match="makes no scores"):
        native.run_kernel(SimpleNamespace(from_queries=None), **_arguments(values=None))


@pytest.mark.parametrize("change", [
    {"queries": None},
    {"values": (torch.zeros(WIDTH, 6), torch.empty(HEADS, ROWS, 6))},
    {"values": (torch.zeros(2, WIDTH, 6), torch.empty(HEADS, ROWS, 6))},
    {"values": (torch.zeros(1, WIDTH - 1, 6), torch.empty(HEADS, ROWS, 6))},
    {"values": (torch.zeros(1, 6, WIDTH).transpose(1, 2), torch.empty(HEADS, ROWS, 6))},
    {"values": (torch.zeros(1, WIDTH, 0), torch.empty(HEADS, ROWS, 0))},
    {"values": (torch.zeros(1, WIDTH, 6), torch.empty(HEADS, ROWS, 5))},
    {"values": (torch.zeros(1, WIDTH, 6), torch.empty(HEADS, ROWS + 1, 6))},
    {"values": (torch.zeros(1, WIDTH, 6), torch.empty(HEADS, 6, ROWS).transpose(1, 2))},
    {"values": (torch.zeros(1, WIDTH, 6, dtype=torch.float64), torch.empty(HEADS, ROWS, 6))},
], ids=["no-queries", "value-2d", "value-heads", "value-keys", "value-strided", "dv-0", "output-dv", "output-rows",
        "output-strided", "value-float64"])
def test_values_and_outputs_the_kernel_cannot_use_are_refused(change) -> None:
    _refused(**change)


def test_a_buffer_the_kernel_is_not_granted_raises_memory_error(tmp_path) -> None:
    """The C code's every allocation is checked: refused them (limit_allocations, on a copy of the library: its own
    instance in this process), both kernels return OUT_OF_MEMORY, which run_kernel raises as MemoryError; with just
    enough granted they compute. attention_rows allocates a row of keys a thread (two with a rollout)."""
    kernel = native.attention_rows()
    if kernel is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    copy = tmp_path / "attention_rows-copy.so"
    shutil.copyfile(kernel.library, copy)
    limited = native.loaded(copy)
    limit = ctypes.CDLL(str(copy)).limit_allocations
    limit.argtypes = (ctypes.c_int64,)
    arguments = _arguments(queries=None, values=None)
    for granted, fails in ((0, True), (4 * WIDTH - 1, True), (4 * WIDTH, False)):
        limit(granted)
        if fails:
            with pytest.raises(MemoryError, match="could not allocate"):
                native.run_kernel(limited, **arguments)
        else:
            native.run_kernel(limited, **arguments)
            np.testing.assert_allclose(arguments["thumb"].numpy(), 0.2)  # every key alike: two keys a block
    if limited.from_queries is not None:  # AVX-512: the tiles' buffers too
        arguments = _arguments(values=(torch.ones(1, WIDTH, 6), torch.zeros(HEADS, ROWS, 6)))
        limit(0)
        with pytest.raises(MemoryError, match="could not allocate"):
            native.run_kernel(limited, **arguments)
        limit(2**62)
        native.run_kernel(limited, **arguments)
        np.testing.assert_allclose(arguments["thumb"].numpy(), 0.2)
        np.testing.assert_allclose(arguments["values"][1].numpy(), 1.0, rtol=1e-6)  # p . (every value 1)
