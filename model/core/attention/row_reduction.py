"""A block of attention's query rows reduced to what a summary (model/core/attention/summary.py) adds up: per-head
statistic sums, each row's sums over the thumbnail's and the rollout's column blocks, and whether a row reaches past
the block.

Two ways make the same numbers: from a block's probabilities with torch ops (`reduce_rows`: any device, and the
patterns a trace keeps whole), and on the CPU from its scores in the native kernel (model/core/attention/native), which
makes the probabilities too (model/core/attention/source.py `PatternSource.reduced_rows` picks).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

STATISTICS = ("entropy (bits)", "mean distance", "to first token", "to previous token", "to itself")


@dataclass(frozen=True)
class RowLayout:
    """How a summary cuts a site's keys, and what it measures."""

    thumbnail_starts: np.ndarray  # (t_k + 1,) int32: the first key of each thumbnail column block, then k_len
    rollout_starts: np.ndarray | None  # (b + 1,) int32 the same for the rollout; None: no rollout (cross-attention)
    positional: bool  # queries and keys are one sequence: distances, the previous token and itself are measured


@dataclass(frozen=True)
class ReducedRows:
    """Query rows start.. of one layer's pattern, reduced (float32, where the rows were computed)."""

    start: int  # the first row's query position
    statistics: torch.Tensor  # (heads, len(STATISTICS)) sums over the rows (0 for what the layout does not measure)
    thumbnail: torch.Tensor  # (heads, rows, t_k): each row's sums over the thumbnail's column blocks
    rollout: torch.Tensor | None  # (rows, b): the heads' sums over the rollout's column blocks, if the layout has one
    sees_ahead: bool  # the pattern is not causal: some row has attention on a key after its own position (one after
    # the block's last row, or where the mask tells); False: none after the block's last row


def reduce_rows(start: int, p: torch.Tensor, layout: RowLayout, entropy: torch.Tensor | None = None,
                sees_ahead: bool | None = None) -> ReducedRows:
    """Rows start.. from p (heads, rows, width <= k_len) float32 probabilities, keys from `width` on 0; entropy
    (heads, rows) in bits if known; sees_ahead if known (else read from p)."""
    rows, width = p.shape[1:]
    last = start + rows - 1
    if entropy is None:
        entropy = -torch.special.xlogy(p, p).sum(-1) / np.log(2)  # (heads, rows); 0 log 0 = 0
    zero = p.new_zeros(len(p))  # (heads,)
    sums = [entropy.sum(-1), zero, p[:, :, 0].sum(-1), zero, zero]
    if layout.positional:  # query i = start + r is row r; key k is column k
        sums[1] = row_distances(start, p).sum(-1)
        for at, offset in ((3, start - 1), (4, start)):  # the previous token, itself (0 where not computed)
            sums[at] = torch.diagonal(p, offset, 1, 2).sum(-1)
    if sees_ahead is None:  # the last key first: a bidirectional block's is not 0, and reading it is cheap
        sees_ahead = width > last + 1 and (bool(p[..., -1].any()) or bool(p[..., last + 1 :].any()))
    rollout = None if layout.rollout_starts is None else column_block_sums(p.sum(0), layout.rollout_starts)
    return ReducedRows(start, torch.stack(sums, -1), column_block_sums(p, layout.thumbnail_starts), rollout,
                       sees_ahead)


def row_distances(first: int, p: torch.Tensor) -> torch.Tensor:
    """(heads, rows): sum_k p[i, k] |i - k| for p (heads, rows, width), queries i = first, first + 1, ..., keys
    0..width-1: over the keys before the block's first query, sum p (i - k) = i sum p - p @ k; after its last,
    p @ k - i sum p; the band of keys between, by its distances. Each row's products are summed apart (over at most
    k_len terms, in float32): one product of all rows and keys at once summed 10^6 float32 terms at 8,192 tokens,
    3e-4 too low. No (rows, width) temporary (4 MB a block)."""
    rows, width = p.shape[1:]
    positions = torch.arange(max(width, first + rows), device=p.device, dtype=torch.float32)
    queries, end = positions[first : first + rows], min(first + rows, width)
    band = (positions[None, first:end] - queries[:, None]).abs_()  # (rows, band)
    sums = (p[..., first:end] * band).sum(-1)  # (heads, rows)
    if first:  # (keys past `width` are 0, and may start before the block: padding, hidden keys)
        before = p[..., : min(first, width)]
        sums += queries * before.sum(-1) - before @ positions[: before.shape[-1]]
    if width > end:
        after = p[..., end:]
        sums += after @ positions[end:width] - queries * after.sum(-1)
    return sums


def column_block_sums(rows: torch.Tensor, starts: np.ndarray) -> torch.Tensor:
    """(..., width) -> (..., len(starts) - 1): each row's sum over each block of columns starts[b]..starts[b+1]-1,
    the columns from `width` on 0. Nothing waits for the device, and no temporary is as large as `rows`."""
    width, n_blocks = rows.shape[-1], len(starts) - 1
    n = int(starts[-1])
    if n == n_blocks:  # a block a column
        return torch.nn.functional.pad(rows, (0, n - width))
    if n % n_blocks == 0:  # equal blocks: the whole blocks seen summed after a reshape, then the one cut at `width`
        each = n // n_blocks
        whole = width // each
        sums = rows[..., : whole * each].unflatten(-1, (whole, each)).sum(-1)
        if width > whole * each:
            sums = torch.cat([sums, rows[..., whole * each :].sum(-1, keepdim=True)], -1)
        return torch.nn.functional.pad(sums, (0, n_blocks - sums.shape[-1]))  # blocks after `width`: 0
    exact = torch.float32 if rows.device.type == "mps" else torch.float64  # differences stay exact (MPS has no
    running = torch.nn.functional.pad(rows.to(exact).cumsum(-1), (1, 0))  # float64)
    at = _on_device(starts, rows.device).clamp(max=width)  # blocks after `width` are empty: their sums 0
    sums = (running[..., at[1:]] - running[..., at[:-1]]).float()
    return sums.masked_fill(at[:-1] == width, 0.0)  # 0 in a NaN row too (its running sums are NaN)


def _on_device(starts: np.ndarray, device: torch.device) -> torch.Tensor:
    """Column block starts as a tensor on `device`, sent once for every call with the same starts (a summary's layout
    reads the same every block)."""
    return _sent(starts.tobytes(), starts.dtype.str, device)


@functools.lru_cache(maxsize=16)
def _sent(data: bytes, dtype: str, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(data, dtype=dtype).astype(np.int64)).to(device)


def sees_ahead(start: int, rows: int, first: int, width: int) -> bool:
    """Whether a block of `rows` query rows from `start` is known not to be causal: keys after its last row computed
    (`width`: some row sees one), or its first row sees the key after itself (every row sees the keys before `first`:
    an encoder's block that holds every row has no key after its last)."""
    return width > start + rows or first > start + 1
