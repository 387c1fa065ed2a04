"""Attention patterns computed when asked, from what attention read: a pattern costs O(tokens x d_head) to keep.

A fused attention kernel (sdpa, flash) never materialises its probabilities; asking a model for them forces
the slow eager path and O(tokens²) memory per head. Instead the Hugging Face models run their fast attention
and, where a capture asks for `hook_pattern`, keep what attention read: the queries and keys as it received
them (rotated, in rotary models), its scale, any bias added to the scores (T5's relative positions) and the
mask it applied. `PatternSource.pattern(...)` then computes softmax(Q K^T x scale + bias + M) for the heads
and query rows a view asks for, exactly as eager attention does (float32: equal to the model's own eager
probabilities to 1e-5, tests/test_hf_heads.py).

Arrays may keep a leading batch dimension until a Trace is made (`source[0]` takes one run of a batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

ROW_BLOCK = 256  # query rows computed at once, at most: bounds the scratch to heads x 256 x k_len floats
BLOCK_BYTES = 32 << 20  # and fewer rows where one (heads, rows, k_len) float32 block would be larger (long texts)
_TORCH = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}


Array = np.ndarray | torch.Tensor  # numpy on the host; torch on the model's device while a capture summarises


@dataclass(frozen=True)
class PatternSource:
    """One layer's attention pattern, not yet computed: (heads, q_len, k_len) on demand, on `device`.

    A trace keeps host numpy arrays; while a capture summarises its run (model/core/summary.py) the arrays are the
    capture's own tensors, still on the model's device. Either way the probabilities are computed on `device`."""

    query: Array  # (heads, q_len, d_head): what attention read (rotated in rotary models)
    key: Array  # (kv_heads, k_len, d_head); query head h reads key head h // (heads / kv_heads)
    scale: float  # the scores' factor (1/sqrt(d_head) in most models; T5: 1)
    allowed: Array  # (q_len, k_len) bool: True where the mask let the query see the key
    bias: Array | None = None  # (heads, q_len, k_len) added to the scores (T5), shared by the layers
    device: str = "cpu"  # where the probabilities are computed: the model's device

    def __getitem__(self, index: int) -> PatternSource:
        """Run `index` of a batch (the arrays' leading dimension)."""
        return replace(self, query=self.query[index], key=self.key[index], allowed=_run(self.allowed, index),
                       bias=None if self.bias is None else _run(self.bias, index))

    @property
    def shape(self) -> tuple[int, int, int]:
        """(heads, q_len, k_len) of the pattern."""
        return (*self.query.shape[:2], self.key.shape[1])

    def arrays(self) -> list[np.ndarray]:
        """The arrays held (the bias and the mask may be shared with other layers: count them once)."""
        return [self.query, self.key, self.allowed, *([] if self.bias is None else [self.bias])]

    def pattern(self, heads: Any = slice(None), rows: Any = slice(None), dtype: type = np.float16) -> np.ndarray:
        """(len(heads), len(rows), k_len) probabilities of the chosen heads and query rows (all by default)."""
        head_ids, row_ids = self._ids(heads, rows)
        out = np.zeros((len(head_ids), len(row_ids), self.key.shape[1]), dtype=dtype)
        for start, probabilities in self.blocks(head_ids, row_ids):
            rows, seen = probabilities.shape[1:]
            out[:, start : start + rows, :seen] = probabilities.to(_TORCH[np.dtype(dtype)]).cpu().numpy()
        return out

    def shrunk(self, size: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(heads, size, size) float32: the pattern's query `rows` x key `cols` shrunk by block means, with the
        blocks of `viz.thumbnails.resample`, one block of query rows at a time (never the whole pattern). When
        rows or cols are fewer than `size`, the pattern's rows x cols themselves (the caller resamples)."""
        if len(rows) < size or len(cols) < size:
            return self.pattern(rows=rows, dtype=np.float32)[:, :, cols]
        every_key = len(cols) == self.key.shape[1] and bool((np.asarray(cols) == np.arange(len(cols))).all())
        columns = None if every_key else torch.from_numpy(np.asarray(cols)).to(self.device)
        means = BlockMeans((self.query.shape[0],), len(rows), len(cols), size)
        for start, probabilities in self.blocks(np.arange(self.query.shape[0]), np.asarray(rows)):
            if columns is not None:
                hidden = self.key.shape[1] - probabilities.shape[-1]
                probabilities = torch.nn.functional.pad(probabilities, (0, hidden))[:, :, columns]
            means.add(start, probabilities)
        return means.result().numpy()

    def _ids(self, heads: Any, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        """Head and query-row indices of a selection (a slice, a list or one index)."""
        head_ids = np.atleast_1d(np.arange(self.query.shape[0])[heads])
        return head_ids, np.atleast_1d(np.arange(self.query.shape[1])[rows])

    def row_blocks(self) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """Every head's pattern, a block of query rows at a time: (their positions, `blocks`' probabilities, each
        row's entropy in bits (heads, rows)), for the one pass that reduces a layer (model/core/summary.py)."""
        positions = np.arange(self.query.shape[1])
        for start, log_p in self._log_blocks(np.arange(self.query.shape[0]), positions):
            p = log_p.exp()
            # -sum p log p in one fused pass; a hidden key adds 0 x (its finite log_p) = 0
            entropy = torch.einsum("hrk,hrk->hr", p, log_p).neg_() / np.log(2)  # (heads, rows)
            del log_p  # not held while the block is read
            yield positions[start : start + p.shape[1]], p, entropy

    def blocks(self, head_ids: np.ndarray, row_ids: np.ndarray) -> Iterator[tuple[int, torch.Tensor]]:
        """(offset in row_ids, float32 probabilities (heads, block, seen) on `device`) for up to ROW_BLOCK query rows
        at a time (BLOCK_BYTES a block at most): softmax(Q K^T x scale + bias + M), as eager attention computes it,
        for the keys 0..seen-1. The keys after those, hidden from every row of the block (a causal mask's future),
        are not computed: their probability is exactly 0, as in eager attention (a causal pattern costs about half
        the whole)."""
        for start, log_p in self._log_blocks(head_ids, row_ids):
            yield start, log_p.exp_()

    def _log_blocks(self, head_ids: np.ndarray, row_ids: np.ndarray) -> Iterator[tuple[int, torch.Tensor]]:
        """`blocks`, as log-probabilities (log_softmax: a hidden key's is the float32 minimum, finite)."""
        device = torch.device(self.device)
        group = self.query.shape[0] // self.key.shape[0]
        heads = torch.from_numpy(np.asarray(head_ids))
        query = _on(self.query, device)[heads.to(device)].float() * self.scale  # (heads, q_len, d_head), scaled
        key = _on(self.key, device)[(heads // group).to(device)].float().transpose(1, 2)  # (heads, d_head, k_len)
        contiguous = len(row_ids) > 0 and bool((np.diff(row_ids) == 1).all())
        step = int(np.clip(BLOCK_BYTES // (4 * len(head_ids) * key.shape[-1]), 16, ROW_BLOCK))  # rows a block
        for start in range(0, len(row_ids), step):
            block = row_ids[start : start + step]
            rows = slice(block[0], block[-1] + 1) if contiguous else block  # a slice copies nothing
            allowed = _on(self.allowed[rows], device)  # (block, k_len) bool
            end = _seen_end(allowed)
            scores = torch.matmul(query[:, _on_index(rows, device)], key[:, :, :end])  # (heads, block, end)
            if self.bias is not None:
                scores += _on(self.bias[np.ix_(head_ids, block, np.arange(end))] if isinstance(self.bias, np.ndarray)
                              else self.bias[heads.to(device)][:, _on_index(rows, device), :end], device).float()
            scores.masked_fill_(~allowed[:, :end], torch.finfo(torch.float32).min)
            log_p = scores.log_softmax(-1)
            del scores  # not held while the block is read
            yield start, log_p


def _seen_end(allowed: torch.Tensor) -> int:
    """For a block of rows (rows, k_len) bool: 1 + the last key any of them sees. Where every row sees some key,
    the keys after that one are exactly 0 for all; a row that sees none is uniform over all keys in eager
    attention, so then every key counts (k_len)."""
    if allowed.device.type == "cpu":  # numpy reduces bools several times faster than torch on the CPU
        host = allowed.numpy()
        seen, every_row = np.flatnonzero(host.any(0)), bool(host.any(1).all())
    else:
        seen, every_row = allowed.any(0).nonzero().flatten(), bool(allowed.any(1).all())
    return int(seen[-1]) + 1 if len(seen) and every_row else allowed.shape[1]


def _run(array: Array, index: int) -> Array:
    """Run `index` of an array whose leading dimension is the batch, or 1 when every run shares it."""
    return array[index if len(array) > 1 else 0]


def _on(array: Array, device: torch.device) -> torch.Tensor:
    """A host array or a tensor as a tensor on `device` (a host array on the CPU: shared, not copied, unless it is
    a read-only view, such as a mask broadcast over a batch)."""
    if isinstance(array, torch.Tensor):
        return array.to(device)
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array).to(device)


def _on_index(rows: slice | np.ndarray, device: torch.device) -> slice | torch.Tensor:
    """Row positions as an index of a tensor on `device`."""
    return rows if isinstance(rows, slice) else torch.from_numpy(np.asarray(rows)).to(device)


SPLIT_BLOCKS = 128  # up to this many column blocks, a row's block sums are a sum per block (fewer passes)


class BlockMeans:
    """Block means of a (..., n_rows, n_cols) matrix given a block of rows at a time (its first columns: the
    others 0), each axis cut into `size` blocks (or one a position, where shorter) as `viz.thumbnails.resample`
    cuts it: (..., size, size) float32."""

    def __init__(self, lead: tuple[int, ...], n_rows: int, n_cols: int, size: int) -> None:
        row_starts = block_starts(n_rows, size)  # (blocks + 1,)
        self.row_block = np.searchsorted(row_starts[:-1], np.arange(n_rows), side="right") - 1  # (n_rows,)
        self.row_counts = torch.from_numpy(np.diff(row_starts)).float()
        self.col_starts = block_starts(n_cols, size)  # (blocks + 1,)
        self.col_counts = torch.from_numpy(np.diff(self.col_starts)).float()
        self.equal_columns = n_cols % len(self.col_counts) == 0
        self.sums = torch.zeros(*lead, len(self.row_counts), len(self.col_counts))

    def add(self, start: int, rows: torch.Tensor) -> None:
        """Rows start.. of the matrix, (..., block, width <= n_cols) float32: columns after `width` are 0. Rows are
        summed into their blocks first (whole rows added: one pass), then the few block rows by columns. The sums
        live where the rows do (the model's device, in a capture's summary)."""
        if self.sums.device != rows.device:
            self.sums = self.sums.to(rows.device)
        blocks = self.row_block[start : start + rows.shape[-2]]  # each row's block, ascending
        first, count = int(blocks[0]), int(blocks[-1] - blocks[0]) + 1
        local = torch.from_numpy(blocks - first).to(rows.device)
        by_row_block = rows.new_zeros(*rows.shape[:-2], count, rows.shape[-1]).index_add_(-2, local, rows)
        self.sums[..., first : first + count, :] += self._column_sums(by_row_block)

    def _column_sums(self, rows: torch.Tensor) -> torch.Tensor:
        """(..., block, width) -> (..., block, column blocks): each row's sum over each block of columns."""
        width, n_blocks = rows.shape[-1], len(self.col_counts)
        if self.equal_columns and width == self.col_starts[-1]:  # equal blocks: a reshape and a sum
            return rows.unflatten(-1, (n_blocks, -1)).sum(-1)
        bounds = np.minimum(self.col_starts, width)  # blocks after `width` are empty: their sums 0
        if n_blocks <= SPLIT_BLOCKS:
            parts = rows.split(np.diff(bounds).tolist(), -1)
            return torch.stack([part.sum(-1) for part in parts], -1)
        running = torch.nn.functional.pad(rows.double().cumsum(-1), (1, 0))  # float64: differences stay exact
        at = torch.from_numpy(bounds).to(rows.device)
        return (running[..., at[1:]] - running[..., at[:-1]]).float()

    def result(self) -> torch.Tensor:
        """(..., size, size) float32 block means, on the CPU."""
        return self.sums.cpu() / (self.row_counts[:, None] * self.col_counts[None, :])


def block_starts(n: int, size: int) -> np.ndarray:
    """(min(n, size) + 1,): the first position of each of `size` blocks of n positions (one a position, where
    n < size), then n; `viz.thumbnails.resample` cuts them so."""
    size = min(n, size)
    return np.append((np.arange(size) * n) // size, n)


@dataclass
class PatternInputs:
    """What attention read, as torch tensors on the model's device (batch kept), until the capture ends."""

    query: torch.Tensor  # (batch, heads, q_len, d_head)
    key: torch.Tensor  # (batch, kv_heads, k_len, d_head)
    scale: float
    mask: torch.Tensor | None  # additive (batch or 1, 1, q_len, >= k_len): the dtype's minimum where hidden
    bias: torch.Tensor | None  # (batch or 1, heads, q_len, k_len) or None

    def source(self, converted: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> PatternSource:
        """A PatternSource of tensors on the model's device, batch kept (the mask and the bias: batch or 1): queries
        and keys in float32 (a pattern is computed exactly from them), the mask as bool. `converted` holds what was
        converted already, by tensor (kept alive with it): every layer reads the same mask and bias tensors,
        converted once for all."""

        def once(tensor: torch.Tensor, convert: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
            if id(tensor) not in converted:
                converted[id(tensor)] = (tensor, convert(tensor))
            return converted[id(tensor)][1]

        q_len, k_len = self.query.size(-2), self.key.size(-2)
        if self.mask is None:
            allowed = torch.ones(1, q_len, k_len, dtype=torch.bool, device=self.query.device)
        else:
            minimum = torch.finfo(self.mask.dtype).min
            allowed = once(self.mask, lambda m: m[:, 0, :, :k_len] > minimum / 2)  # (batch or 1, q_len, k_len)
        bias = None if self.bias is None else once(self.bias, lambda b: b.float())
        return PatternSource(query=self.query.float(), key=self.key.float(), scale=self.scale, allowed=allowed,
                             bias=bias, device=str(self.query.device))
