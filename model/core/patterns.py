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

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

ROW_BLOCK = 256  # query rows computed at once: bounds the scratch to heads x 256 x k_len floats
_TORCH = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}


@dataclass(frozen=True)
class PatternSource:
    """One layer's attention pattern, not yet computed: (heads, q_len, k_len) on demand."""

    query: np.ndarray  # (heads, q_len, d_head): what attention read (rotated in rotary models)
    key: np.ndarray  # (kv_heads, k_len, d_head); query head h reads key head h // (heads / kv_heads)
    scale: float  # the scores' factor (1/sqrt(d_head) in most models; T5: 1)
    allowed: np.ndarray  # (q_len, k_len) bool: True where the mask let the query see the key
    bias: np.ndarray | None = None  # (heads, q_len, k_len) added to the scores (T5), shared by the layers

    def __getitem__(self, index: int) -> PatternSource:
        """Run `index` of a batch (the arrays' leading dimension)."""
        return replace(self, query=self.query[index], key=self.key[index], allowed=self.allowed[index],
                       bias=None if self.bias is None else self.bias[index])

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
            out[:, start : start + rows, :seen] = probabilities.to(_TORCH[np.dtype(dtype)]).numpy()
        return out

    def shrunk(self, size: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(heads, size, size) float32: the pattern's query `rows` x key `cols` shrunk by block means, with the
        blocks of `viz.thumbnails.resample`, one block of query rows at a time (never the whole pattern). When
        rows or cols are fewer than `size`, the pattern's rows x cols themselves (the caller resamples)."""
        if len(rows) < size or len(cols) < size:
            return self.pattern(rows=rows, dtype=np.float32)[:, :, cols]
        every_key = len(cols) == self.key.shape[1] and bool((np.asarray(cols) == np.arange(len(cols))).all())
        columns = None if every_key else torch.from_numpy(np.asarray(cols))
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

    def blocks(self, head_ids: np.ndarray, row_ids: np.ndarray) -> Iterator[tuple[int, torch.Tensor]]:
        """(offset in row_ids, float32 probabilities (heads, block, seen)) for ROW_BLOCK query rows at a time:
        softmax(Q K^T x scale + bias + M), as eager attention computes it, for the keys 0..seen-1. The keys
        after those, hidden from every row of the block (a causal mask's future), are not computed: their
        probability is exactly 0, as in eager attention (so a causal pattern costs about half the whole)."""
        group = self.query.shape[0] // self.key.shape[0]
        query = torch.from_numpy(self.query)[head_ids].float() * self.scale  # (heads, q_len, d_head), scaled
        key = torch.from_numpy(self.key)[head_ids // group].float().transpose(1, 2)  # (heads, d_head, k_len)
        k_len = key.shape[-1]
        contiguous = len(row_ids) > 0 and bool((np.diff(row_ids) == 1).all())
        for start in range(0, len(row_ids), ROW_BLOCK):
            block = row_ids[start : start + ROW_BLOCK]
            rows = slice(block[0], block[-1] + 1) if contiguous else block  # a slice copies nothing
            allowed = self.allowed[rows]  # (block, k_len)
            seen = np.flatnonzero(allowed.any(0))
            # where every row sees some key, the keys after the last one seen are exactly 0; a row that sees none
            # is uniform over all keys in eager attention, so then every key is computed
            end = int(seen[-1]) + 1 if len(seen) and allowed.any(1).all() else k_len
            scores = torch.matmul(query[:, rows], key[:, :, :end])  # (heads, block, end)
            if self.bias is not None:
                scores += torch.from_numpy(self.bias[np.ix_(head_ids, block, np.arange(end))]).float()
            hidden = ~torch.tensor(allowed[:, :end])  # a copy: the mask may be a read-only view shared by layers
            scores.masked_fill_(hidden, torch.finfo(torch.float32).min)
            yield start, scores.softmax(-1)


class BlockMeans:
    """Block means of a (..., n_rows, n_cols) matrix given a block of rows at a time (its first columns: the
    others 0), each axis cut into `size` blocks (or one a position, where shorter) as `viz.thumbnails.resample`
    cuts it: (..., size, size) float32."""

    def __init__(self, lead: tuple[int, ...], n_rows: int, n_cols: int, size: int) -> None:
        self.row_block, self.row_counts = _blocks_of(n_rows, size)
        self.col_block, self.col_counts = _blocks_of(n_cols, size)
        self.equal_columns = n_cols % len(self.col_counts) == 0
        self.sums = torch.zeros(*lead, len(self.row_counts), len(self.col_counts))

    def add(self, start: int, rows: torch.Tensor) -> None:
        """Rows start.. of the matrix, (..., block, width <= n_cols) float32: columns after `width` are 0."""
        width = rows.shape[-1]
        if self.equal_columns and width == len(self.col_block):  # equal blocks: a reshape and a sum
            by_column = rows.unflatten(-1, (self.sums.shape[-1], -1)).sum(-1)  # (..., block, size)
        else:
            by_column = torch.zeros(*rows.shape[:-1], self.sums.shape[-1]).index_add_(-1, self.col_block[:width],
                                                                                      rows)
        self.sums.index_add_(-2, self.row_block[start : start + rows.shape[-2]], by_column)

    def result(self) -> torch.Tensor:
        return self.sums / (self.row_counts[:, None] * self.col_counts[None, :])


def block_starts(n: int, size: int) -> np.ndarray:
    """(min(n, size) + 1,): the first position of each of `size` blocks of n positions (one a position, where
    n < size), then n; `viz.thumbnails.resample` cuts them so."""
    size = min(n, size)
    return np.append((np.arange(size) * n) // size, n)


def _blocks_of(n: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For n positions cut as `block_starts`: each position's block (n,) and each block's count."""
    starts = block_starts(n, size)
    block = np.searchsorted(starts[:-1], np.arange(n), side="right") - 1
    return torch.from_numpy(block), torch.from_numpy(np.diff(starts)).float()


@dataclass
class PatternInputs:
    """What attention read, as torch tensors on the model's device (batch kept), until the capture ends."""

    query: torch.Tensor  # (batch, heads, q_len, d_head)
    key: torch.Tensor  # (batch, kv_heads, k_len, d_head)
    scale: float
    mask: torch.Tensor | None  # additive (batch or 1, 1, q_len, >= k_len): the dtype's minimum where hidden
    bias: torch.Tensor | None  # (batch or 1, heads, q_len, k_len) or None

    def to_host(self, converted: dict[int, np.ndarray]) -> PatternSource:
        """A PatternSource of CPU numpy arrays; `converted` remembers what was moved already, by tensor: every
        layer reads the same mask and bias tensors, which so have one host copy (views of it) for all."""

        def host(tensor: torch.Tensor, convert) -> np.ndarray:
            if id(tensor) not in converted:
                converted[id(tensor)] = convert(tensor.detach()).cpu().numpy()
            return converted[id(tensor)]

        batch, _, q_len, _ = self.query.shape
        k_len = self.key.size(-2)
        if self.mask is None:
            allowed = np.ones((1, q_len, k_len), dtype=bool)
        else:
            minimum = torch.finfo(self.mask.dtype).min
            allowed = host(self.mask, lambda m: m > minimum / 2)[:, 0, :, :k_len]  # (batch or 1, q_len, k_len)
        exact = lambda t: t.float() if t.dtype != torch.float32 else t  # noqa: E731
        bias = None if self.bias is None else host(self.bias, exact)
        return PatternSource(
            query=host(self.query, exact), key=host(self.key, exact), scale=self.scale,
            allowed=np.broadcast_to(allowed, (batch, q_len, k_len)),
            bias=None if bias is None else np.broadcast_to(bias, (batch, *bias.shape[1:])),
        )
