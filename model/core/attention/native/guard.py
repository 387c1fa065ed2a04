"""The native kernel's guard: every array, size and index attention_rows.c reads, writes or indexes with, checked
before the call (`check_arguments`, run_kernel's). A wrong one is a programming error, but it raises ValueError with
a sentence, never lets the C code reach outside an array."""

from __future__ import annotations

import numbers

import numpy as np
import torch

LARGEST = 2**27 - 1  # the most heads, rows, keys, blocks or head size: the C code's int indices hold 16 times as many
LAST_QUERY = 2**62  # the largest first query index (query0): its rows' indices stay within int64


def check_arguments(scores: torch.Tensor, allowed: torch.Tensor | np.ndarray, first: int, query0: int,
                    floor_bits: float, thumb_starts: np.ndarray, thumb: torch.Tensor, roll_starts: np.ndarray | None,
                    roll: torch.Tensor | None, stats: torch.Tensor, makes_scores: bool,
                    queries: tuple[torch.Tensor, torch.Tensor] | None,
                    values: tuple[torch.Tensor, torch.Tensor] | None, sinks: torch.Tensor | None = None,
                    normalisers: torch.Tensor | None = None) -> None:
    """ValueError where any argument of run_kernel (it says what each is) is not what the kernel reads and writes;
    `allowed` as the kernel gets it (contiguous), `makes_scores`: whether the kernel has `from_queries`."""
    _floats("the scores", scores, 3)
    heads, rows, width = scores.shape
    _require(1 <= heads <= LARGEST and rows <= LARGEST and 1 <= width <= LARGEST,
             f"the scores' (heads, rows, keys) {tuple(scores.shape)} need a head and a key, and at most {LARGEST} each")
    _require(isinstance(allowed, np.ndarray | torch.Tensor) and allowed.ndim == 2
             and allowed.dtype in (np.bool_, torch.bool), "the mask `allowed` is no (rows, keys) array of bools")
    _require(allowed.shape[0] == rows and allowed.shape[1] >= width,
             f"the mask `allowed` {tuple(allowed.shape)} is not (rows, at least keys) of scores {tuple(scores.shape)}")
    _require(not isinstance(allowed, torch.Tensor) or allowed.device.type == "cpu",
             "the mask `allowed` is not on the CPU")
    _require(_integer(first) and 0 <= first <= width, f"`first` ({first}) is not a key count from 0 to {width}")
    _require(_integer(query0) and 0 <= query0 <= LAST_QUERY, f"`query0` ({query0}) is no query index from 0")
    _require(isinstance(floor_bits, numbers.Real) and -126.0 <= floor_bits <= 0.0,
             f"`floor_bits` ({floor_bits}) is outside [-126, 0], where 2^x is a normal float")
    _starts("thumb_starts", thumb_starts, width)
    _floats("the thumbnail sums `thumb`", thumb, 3)
    _require(thumb.shape == (heads, rows, len(thumb_starts) - 1),
             f"the thumbnail sums `thumb` {tuple(thumb.shape)} are not (heads, rows, blocks of thumb_starts)")
    _floats("the statistics `stats`", stats, 3)
    _require(stats.shape == (heads, rows, 5), f"the statistics `stats` {tuple(stats.shape)} are not (heads, rows, 5)")
    _require((roll is None) == (roll_starts is None), "`roll` and `roll_starts` come together or not at all")
    if roll is not None:
        _starts("roll_starts", roll_starts, width)
        _floats("the rollout sums `roll`", roll, 2)
        _require(roll.shape == (rows, len(roll_starts) - 1),
                 f"the rollout sums `roll` {tuple(roll.shape)} are not (rows, blocks of roll_starts)")
    if sinks is not None:
        _floats("the sink logits `sinks`", sinks, 1)
        _require(sinks.shape == (heads,), f"the sink logits `sinks` {tuple(sinks.shape)} are not one a head ({heads})")
    if normalisers is not None:
        _floats("the normalisers", normalisers, 2)
        _require(normalisers.shape == (heads, rows),
                 f"the normalisers {tuple(normalisers.shape)} are not one a row of each head ({heads}, {rows})")
    if queries is not None:
        _require(makes_scores, "this kernel makes no scores from queries (it was built without AVX-512)")
        _check_queries(*queries, heads, rows, width)
    if values is not None:
        _require(queries is not None, "`values` need `queries`: the kernel multiplies the scores it makes")
        _check_values(*values, queries[1], heads, rows, width)


def check_scores(query: torch.Tensor, keys: torch.Tensor, width: int) -> None:
    """ValueError where query_scores's arguments (native/__init__.py `scores_of`) are not what it reads: query (rows,
    d) and keys (d, >= width), as one head's of attention_rows_from_queries."""
    _floats("the queries", query, 2)
    _require(_integer(width) and 1 <= width <= LARGEST, f"`width` ({width}) is no key count from 1 to {LARGEST}")
    _check_queries(query[None], keys[None], 1, len(query), width)


def _check_queries(query: torch.Tensor, keys: torch.Tensor, heads: int, rows: int, width: int) -> None:
    """query (heads, rows, d) contiguous; keys (kv_heads, d, >= width), kv_heads dividing heads, each key row
    contiguous and the heads d rows apart (the C code's `keys + head * d * key_stride`)."""
    _floats("the queries", query, 3, contiguous=False)
    _require(query.is_contiguous() and query.shape[:2] == (heads, rows) and 1 <= query.shape[2] <= LARGEST,
             f"the queries {tuple(query.shape)} are no contiguous ({heads} heads, {rows} rows, d) as the scores")
    _floats("the keys", keys, 3, contiguous=False)
    _require(len(keys) > 0 and heads % len(keys) == 0 and keys.shape[1] == query.shape[2] and keys.shape[2] >= width,
             f"the keys {tuple(keys.shape)} are no (key heads dividing {heads}, d, at least {width} keys)")
    _require((keys.stride(2) == 1 or keys.shape[2] == 1) and keys.stride(1) >= width
             and keys.stride(0) == keys.shape[1] * keys.stride(1),
             f"the keys' strides {keys.stride()} are not (d rows, a key row, 1) of keys read {width} at a time")


def _check_values(value: torch.Tensor, output: torch.Tensor, keys: torch.Tensor, heads: int, rows: int,
                  width: int) -> None:
    """value (kv_heads, >= width, dv), each head's contiguous; output (heads, rows, dv), each head's contiguous."""
    _floats("the values", value, 3, contiguous=False)
    _require(value.shape[0] == len(keys) and value.shape[1] >= width and 1 <= value.shape[2] <= LARGEST
             and value[0].is_contiguous(),
             f"the values {tuple(value.shape)} are no (a head a key head, at least {width} keys, dv), each contiguous")
    _floats("the output rows", output, 3, contiguous=False)
    _require(output.shape == (heads, rows, value.shape[2]) and output[0].is_contiguous(),
             f"the output rows {tuple(output.shape)} are no ({heads}, {rows}, dv), each head's contiguous")


def _floats(what: str, tensor: object, ndim: int, contiguous: bool = True) -> None:
    _require(isinstance(tensor, torch.Tensor) and tensor.ndim == ndim, f"{what} are no {ndim}-dimensional tensor")
    _require(tensor.dtype == torch.float32 and tensor.device.type == "cpu",
             f"{what} are not float32 on the CPU ({tensor.dtype}, {tensor.device})")
    _require(tensor.is_contiguous() or not contiguous, f"{what} are not contiguous")


def _starts(what: str, starts: object, width: int) -> None:
    """Block starts: int32, contiguous, 0 first, never decreasing, the last at `width` or after."""
    _require(isinstance(starts, np.ndarray) and starts.ndim == 1 and starts.dtype == np.int32
             and starts.flags.c_contiguous and 2 <= len(starts) <= LARGEST + 1,
             f"`{what}` is no contiguous int32 array of a block's starts and its end")
    _require(starts[0] == 0 and bool(np.all(starts[1:] >= starts[:-1])) and starts[-1] >= width,
             f"`{what}` do not run from 0 up to the scores' {width} keys or past them")


def _integer(value: object) -> bool:
    return isinstance(value, numbers.Integral)


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise ValueError(f"attention_rows: {problem}.")
