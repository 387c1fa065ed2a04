"""A block of attention's query rows reduced to what a summary (model/core/attention/summary.py) adds up: per-head
statistic sums, each row's sums over the thumbnail's and the rollout's column blocks, and whether a row reaches past
the block.

Two ways make the same numbers: from a block's probabilities with torch ops (`reduce_rows`: any device, and the
patterns a trace keeps whole), and on the CPU from its scores in the native kernel (model/core/attention/native), which
makes the probabilities too (model/core/attention/source.py `PatternSource.reduced_rows` picks). Both make each row's
first `ROW_STATISTICS` (the kernel's), then `statistic_sums` makes the rest from them and from the probabilities the
block leaves: the shares of later queries (from `role_start`), each query's share on its induction target
(`induction_targets`, one gather a block) and its distance less the first token's part.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

ROLE_FROM = 16  # the first query of the later queries' shares: earlier ones see too few keys to say what a head does
STATISTICS = ("entropy (bits)", "mean distance", "to first token", "to previous token", "to itself",
              f"to first token (from query {ROLE_FROM})", f"to previous token (from query {ROLE_FROM})",
              "to token after its last occurrence", "mean distance off the first token")
ROW_STATISTICS = 5  # the first STATISTICS, made row by row (the native kernel's; attention_rows.c)


@dataclass(frozen=True)
class RowLayout:
    """How a summary cuts a site's keys, and what it measures."""

    thumbnail_starts: np.ndarray  # (t_k + 1,) int32: the first key of each thumbnail column block, then k_len
    rollout_starts: np.ndarray | None  # (b + 1,) int32 the same for the rollout; None: no rollout (cross-attention)
    positional: bool  # queries and keys are one sequence: distances, the previous token and itself are measured
    from_row: int = 0  # the first query row of the later queries' shares (`role_start`)
    targets: np.ndarray | None = None  # (q_len,) int64: each query's induction target key, -1 where it has none
    # (`induction_targets`); None: not measured (no token ids, or not one sequence)


@dataclass(frozen=True)
class ReducedRows:
    """Query rows start.. of one layer's pattern, reduced (float32, where the rows were computed)."""

    start: int  # the first row's query position
    statistics: torch.Tensor  # (heads, len(STATISTICS)) sums over the rows (0 for what the layout does not measure)
    thumbnail: torch.Tensor  # (heads, rows, t_k): each row's sums over the thumbnail's column blocks
    rollout: torch.Tensor | None  # (rows, b): the heads' sums over the rollout's column blocks, if the layout has one
    sees_ahead: bool  # the pattern is not causal: some row has attention on a key after its own position (one after
    # the block's last row, or where the mask tells); False: none after the block's last row
    normalisers: torch.Tensor | None = None  # (heads, rows) each row's log2 normaliser in bits: p = 2^(score - it) for
    # the keys it sees (scores in bits: Q K^T x scale x log2 e); None where the rows came as probabilities


def reduce_rows(start: int, p: torch.Tensor, layout: RowLayout, entropy: torch.Tensor | None = None,
                sees_ahead: bool | None = None, normalisers: torch.Tensor | None = None) -> ReducedRows:
    """Rows start.. from p (heads, rows, width <= k_len) float32 probabilities, keys from `width` on 0; entropy
    (heads, rows) in bits if known; sees_ahead if known (else read from p); the rows' normalisers if known."""
    rows, width = p.shape[1:]
    last = start + rows - 1
    if entropy is None:
        entropy = -torch.special.xlogy(p, p).sum(-1) / np.log(2)  # (heads, rows); 0 log 0 = 0
    each = p.new_zeros(*p.shape[:2], ROW_STATISTICS)  # (heads, rows, ROW_STATISTICS): the kernel's, row by row
    each[..., 0], each[..., 2] = entropy, p[:, :, 0]
    if layout.positional:  # query i = start + r is row r; key k is column k
        each[..., 1] = row_distances(start, p)
        queries = torch.arange(start, start + rows, device=p.device)
        each[..., 3], each[..., 4] = key_shares(p, queries - 1), key_shares(p, queries)  # previous, itself
    if sees_ahead is None:  # the last key first: a bidirectional block's is not 0, and reading it is cheap
        sees_ahead = width > last + 1 and (bool(p[..., -1].any()) or bool(p[..., last + 1 :].any()))
    rollout = None if layout.rollout_starts is None else column_block_sums(p.sum(0), layout.rollout_starts)
    return ReducedRows(start, statistic_sums(start, each, target_sums(start, p, layout), layout),
                       column_block_sums(p, layout.thumbnail_starts), rollout, sees_ahead, normalisers)


def statistic_sums(start: int, each: torch.Tensor, targets: torch.Tensor | None, layout: RowLayout) -> torch.Tensor:
    """(heads, len(STATISTICS)) sums over a block's rows from query `start` on: of each row's first ROW_STATISTICS
    `each` (heads, rows, ROW_STATISTICS), of the first and previous token's shares over the rows from
    `layout.from_row`, of their shares on their induction targets (`targets`, (heads,) `target_sums`; read only
    where the layout has targets, else 0), and of each row's distance less the first token's part, p[i, 0] x i (0
    where the layout is not positional: its distances are)."""
    later = each[:, max(layout.from_row - start, 0) :, 2:4].sum(1)  # (heads, 2)
    induction = each.new_zeros(len(each)) if layout.targets is None else targets  # (heads,)
    queries = torch.arange(start, start + each.shape[1], device=each.device, dtype=each.dtype)  # (rows,)
    off_first = (each[..., 1] - each[..., 2] * queries).sum(-1) if layout.positional else induction.new_zeros(len(each))
    return torch.cat([each.sum(1), later, induction[:, None], off_first[:, None]], -1)


def target_sums(start: int, p: torch.Tensor, layout: RowLayout) -> torch.Tensor | None:
    """(heads,): the sum over a block's rows of each one's probability on its induction target key, from p (heads,
    rows, width) of queries start.. (a row with no target, or one past `width`: 0); None where the layout measures
    none. On the CPU numpy's indexing (half the time of torch's few small ops), elsewhere one gather."""
    if layout.targets is None:
        return None
    rows = p.shape[1]
    if p.device.type == "cpu":
        targets = layout.targets[start : start + rows]
        seen = np.flatnonzero((targets >= 0) & (targets < p.shape[-1]))
        return torch.from_numpy(p.numpy()[:, seen, targets[seen]].sum(-1))
    return key_shares(p, _on_device(layout.targets, p.device)[start : start + rows]).sum(-1)


def key_shares(p: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(heads, rows): p[h, r, keys[r]] of p (heads, rows, width), keys (rows,) int64 on p's device; 0 where keys[r] is
    not a key computed (< 0, or >= width). One gather: nothing waits for the device."""
    width = p.shape[-1]
    shares = p.gather(-1, keys.clamp(0, width - 1).expand(*p.shape[:2])[..., None])[..., 0]  # (heads, rows)
    return shares.masked_fill_((keys < 0) | (keys >= width), 0.0)


def role_start(q_len: int) -> int:
    """The first query of the later queries' shares: ROLE_FROM, or in a text of fewer than 2 x ROLE_FROM queries, its
    second half's first (q_len // 2): half the queries, at least one, still counted."""
    return min(ROLE_FROM, q_len // 2)


def induction_targets(ids: Sequence[int]) -> np.ndarray:
    """(n,) int64: for each position i of a sequence of token ids, its induction target j + 1, the token after the
    last earlier position j of the same id; -1 where the id did not occur before, or occurred just before (j + 1 = i:
    the target would be the query itself)."""
    id_array = np.asarray(ids, dtype=np.int64)  # (n,)
    order = np.argsort(id_array, kind="stable")  # positions of each id together, in order
    last = np.full(len(id_array), -1)
    same = id_array[order[1:]] == id_array[order[:-1]]
    last[order[1:][same]] = order[:-1][same]  # each position's last earlier one of its id
    return np.where((last >= 0) & (last + 1 < np.arange(len(id_array))), last + 1, -1)


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


def _on_device(indices: np.ndarray, device: torch.device) -> torch.Tensor:
    """Column block starts, or induction targets, as an int64 tensor on `device`, sent once for every call with the
    same array (a summary's layout reads the same every block)."""
    return _sent(indices.tobytes(), indices.dtype.str, device)


@functools.lru_cache(maxsize=16)
def _sent(data: bytes, dtype: str, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(data, dtype=dtype).astype(np.int64)).to(device)


def sees_ahead(start: int, rows: int, first: int, width: int) -> bool:
    """Whether a block of `rows` query rows from `start` is known not to be causal: keys after its last row computed
    (`width`: some row sees one), or its first row sees the key after itself (every row sees the keys before `first`:
    an encoder's block that holds every row has no key after its last)."""
    return width > start + rows or first > start + 1
