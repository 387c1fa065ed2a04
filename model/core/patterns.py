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

from model.core import native
from model.core.row_reduction import STATISTICS, ReducedRows, RowLayout, column_block_sums, reduce_rows

ROW_BLOCK = 128  # query rows computed at once, at most: bounds the scratch to heads x 128 x k_len floats; fewer rows
# skip more of a causal mask's hidden keys, at a fixed cost a block (128 was the fastest at 512 and 2,048 tokens)
BLOCK_BYTES = 32 << 20  # and fewer rows where one (heads, rows, k_len) float32 block would be larger (long texts)
LOG2_E = float(np.log2(np.e))  # scores are computed in bits (x log2 e): exp2 took a quarter of exp's time on the CPU
EXP_FLOOR = -112.0  # scores in bits (less each row's greatest) are raised to this before exp2: 2^-112 over a row's
# sum (at most 8,192 = 2^13 keys) stays above 2^-126, float32's smallest normal number. exp2 took four times as long
# where its results are smaller (subnormal or 0; exp, 60x), and so do products with them. A key's probability then
# differs from eager attention's by under 1e-33, except hidden keys', set to exactly 0.
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

    def reduced_rows(self, layout: RowLayout, value: torch.Tensor | None = None, output: torch.Tensor | None = None,
                     scratch: Scratch | None = None) -> Iterator[ReducedRows]:
        """Every head's pattern reduced a block of query rows at a time (model/core/row_reduction.py), for the one
        pass that summarises a layer (model/core/summary.py). Given the layer's `value` (kv_heads, k_len, d_head) on
        `device`, each block's attention output (its probabilities times the values) is written into `output`
        (heads, q_len, d_head) float32 as well: the layer's attention computed once for the forward pass and for the
        summary. On the CPU the native kernel makes a block's probabilities and reductions in one pass over each row
        (model/core/native), elsewhere (or where it did not compile) torch ops. `scratch`: buffers to compute in,
        kept by a caller that reads many layers."""
        scratch = scratch or Scratch()
        kernel = native.attention_rows() if torch.device(self.device).type == "cpu" else None
        blocks = (self._native_blocks(kernel, layout, scratch) if kernel is not None
                  else self._torch_blocks(layout, scratch))
        value = None if value is None else value.float()
        for p, reduced in blocks:
            if value is not None:  # each group of heads reads one value head: (kv_heads, group x rows, d_head)
                grouped = torch.matmul(p.view(len(value), -1, p.shape[-1]), value[:, : p.shape[-1]])
                output[:, reduced.start : reduced.start + p.shape[1]] = grouped.view(*p.shape[:2], -1)
            yield reduced

    def _native_blocks(self, kernel: Callable, layout: RowLayout, scratch: Scratch
                       ) -> Iterator[tuple[torch.Tensor, ReducedRows]]:
        """(probabilities (heads, rows, seen), the block reduced) from the native kernel, a block of rows at a time."""
        heads, positions = self.query.shape[0], np.arange(self.query.shape[1])
        for start, first, _, scores, allowed in self._scores(np.arange(heads), positions, scratch):
            n, width = scores.shape[1:]
            thumbnail = torch.empty(heads, n, len(layout.thumbnail_starts) - 1)
            rollout = None if layout.rollout_starts is None else torch.empty(n, len(layout.rollout_starts) - 1)
            statistics = torch.empty(heads, n, len(STATISTICS))
            native.run_kernel(kernel, scores, allowed, first, start, layout.positional, EXP_FLOOR,
                              layout.thumbnail_starts, thumbnail, layout.rollout_starts, rollout, statistics)
            yield scores, ReducedRows(start, statistics.sum(1), thumbnail, rollout, width > start + n)  # p, now

    def _torch_blocks(self, layout: RowLayout, scratch: Scratch) -> Iterator[tuple[torch.Tensor, ReducedRows]]:
        """`_native_blocks` made with torch ops, on `device`."""
        positions = np.arange(self.query.shape[1])
        for start, p, shifted, total in self._blocks(np.arange(self.query.shape[0]), positions, scratch):
            # -sum p log2 p with log2 p = shifted - log2 Z: log2 Z - sum p shifted (a hidden key adds 0 x its finite
            # score = 0); the products made in the scores' scratch
            entropy = total.log2_().sub_(shifted.mul_(p).sum(-1))  # (heads, rows)
            rows, width = p.shape[1:]
            yield p, reduce_rows(start, p, layout, entropy, beyond_last=width > start + rows)

    def blocks(self, head_ids: np.ndarray, row_ids: np.ndarray) -> Iterator[tuple[int, torch.Tensor]]:
        """(offset in row_ids, float32 probabilities (heads, block, seen) on `device`) for up to ROW_BLOCK query rows
        at a time (BLOCK_BYTES a block at most): softmax(Q K^T x scale + bias + M), as eager attention computes it,
        for the keys 0..seen-1. The keys after those, hidden from every row of the block (a causal mask's future),
        are not computed: their probability is exactly 0, as in eager attention (a causal pattern costs about half
        the whole). A block is scratch the next one overwrites: read or copy it before asking for the next."""
        for start, p, _, _ in self._blocks(head_ids, row_ids, Scratch()):
            yield start, p

    def _blocks(self, head_ids: np.ndarray, row_ids: np.ndarray, scratch: Scratch
                ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """`blocks`, with the scores they are the base-2 softmax of (in bits: eager's scores x log2 e), less each
        row's greatest (so <= 0; floored at EXP_FLOOR, a hidden key's too), computed in `scratch`, and each row's sum
        of 2^scores (heads, rows), Z."""
        device = torch.device(self.device)
        for start, first, every_row, scores, allowed in self._scores(head_ids, row_ids, scratch):
            end = scores.shape[-1]
            # the band's mask as floats: adding and multiplying took a seventh of masked_fill's time on the CPU
            keep = _on(allowed[:, first:end], device).float() if end > first else None  # (block, band): 1 seen
            if keep is not None:
                scores[..., first:end] += (1 - keep) * torch.finfo(torch.float32).min
            scores -= scores.amax(-1, keepdim=True)  # each row's greatest score 0
            scores.clamp_(min=EXP_FLOOR)
            # softmax as exp2, sum, divide: torch's fused softmax (its exp) took 1.7x as long on the CPU
            p = torch.exp2(scores, out=scratch.probabilities(scores.shape, device))
            total = p.sum(-1)  # (heads, block)
            p /= total[..., None]
            if keep is not None:
                if not every_row:  # a row that sees no key stays uniform (its scores all the minimum), as in eager
                    keep[~_on(allowed, device).any(-1)] = 1.0
                p[..., first:end] *= keep  # a hidden key's probability exactly 0, as in eager attention
            yield start, p, scores, total

    def _scores(self, head_ids: np.ndarray, row_ids: np.ndarray, scratch: Scratch
                ) -> Iterator[tuple[int, int, bool, torch.Tensor, Array]]:
        """For each block of up to ROW_BLOCK query rows (BLOCK_BYTES at most): (its offset in row_ids, `first`,
        whether every row sees some key, its scores, its rows of the mask (block, k_len), where the mask is). The
        scores (heads, block, end) are eager's before the mask, in bits (x log2 e), computed in `scratch` on
        `device`: every row sees every key before `first`, and the keys from `end` on are hidden from every row, so
        not computed (`mask_spans`)."""
        device = torch.device(self.device)
        heads = torch.from_numpy(np.asarray(head_ids)).to(device)
        query = _on(self.query, device).float()  # (heads, q_len, d_head)
        key = _on(self.key, device).float()  # (kv_heads, k_len, d_head): query head h reads h // (heads / kv_heads)
        if len(head_ids) < len(query) or bool((np.asarray(head_ids) != np.arange(len(query))).any()):
            query, key = query[heads], key[heads // (len(query) // len(key))]  # some heads: a key head each
        key = key.transpose(1, 2)  # (kv_heads, d_head, k_len); a group of query heads reads each
        contiguous = len(row_ids) > 0 and bool((np.diff(row_ids) == 1).all())
        step = int(np.clip(BLOCK_BYTES // (4 * len(head_ids) * key.shape[-1]), 16, ROW_BLOCK))  # rows a block
        selected = slice(row_ids[0], row_ids[-1] + 1) if contiguous else row_ids  # a slice copies nothing
        on_host_already = isinstance(self.allowed, np.ndarray)  # a trace's: reduced where it is, not sent to the device
        mask = _on(self.allowed[selected], torch.device("cpu") if on_host_already else device)
        spans = scratch.spans(mask, step) if len(row_ids) else []
        for (first, end, every_row), start in zip(spans, range(0, len(row_ids), step), strict=True):
            block = row_ids[start : start + step]
            rows = slice(block[0], block[-1] + 1) if contiguous else block
            scores = scratch.scores((len(head_ids), len(block), end), device)
            # a group of query heads reads one key head: (kv_heads, group x block, end) is (heads, block, end)
            scaled = query[:, _on_index(rows, device)] * (self.scale * LOG2_E)  # (heads, block, d_head): bits
            grouped = scaled.reshape(len(key), -1, query.shape[-1])
            torch.matmul(grouped, key[:, :, :end], out=scores.view(len(key), -1, end))
            if self.bias is not None:  # in nats, as the scores were
                bias = (self.bias[np.ix_(head_ids, block, np.arange(end))] if isinstance(self.bias, np.ndarray)
                        else self.bias[heads][:, _on_index(rows, device), :end])
                scores.add_(_on(bias, device).float(), alpha=LOG2_E)
            yield start, first, every_row, scores, self.allowed[rows]


class Scratch:
    """The float32 buffers every block of a pattern is computed in (its scores; for torch's softmax, its
    probabilities), grown when a block needs more: on the CPU a fresh block-sized tensor for every block cost, in
    page faults, about as much again as the block's arithmetic. One pass over many layers keeps one (a capture's
    summary), so all its blocks reuse the same memory, and each mask's spans (`mask_spans`) are found once for every
    layer that reads it."""

    def __init__(self) -> None:
        self._memory: list[torch.Tensor | None] = [None, None]  # scores, probabilities: (floats,) each
        self._spans: dict[tuple, tuple[torch.Tensor, list[tuple[int, int, bool]]]] = {}  # by mask: (mask, spans)

    def scores(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """A contiguous float32 tensor of `shape` on `device` for a block's scores, overwritten by the next call."""
        return self._buffer(0, shape, device)

    def probabilities(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """The same for a block's probabilities."""
        return self._buffer(1, shape, device)

    def _buffer(self, index: int, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        size, memory = int(np.prod(shape)), self._memory[index]
        if memory is None or len(memory) < size or memory.device != device:
            memory = self._memory[index] = torch.empty(size, device=device)
        return memory[:size].view(shape)

    def spans(self, allowed: torch.Tensor, step: int) -> list[tuple[int, int, bool]]:
        """`mask_spans(allowed, step)`, remembered while this scratch lives. The mask is known by its memory, which
        the remembered entry keeps alive (so no other tensor can take its place), as every layer of a model reads
        the same mask through views of its own."""
        key = (allowed.data_ptr(), allowed.device, tuple(allowed.shape), allowed.stride(), step)
        if key not in self._spans:
            self._spans[key] = (allowed, mask_spans(allowed, step))
        return self._spans[key][1]


def mask_spans(allowed: torch.Tensor, step: int) -> list[tuple[int, int, bool]]:
    """For each block of `step` rows of a (rows, k_len) bool mask: (first, end, every row sees a key) such that
    every row of the block sees every key before `first`, so only the scores of keys first..end-1 need masking (a
    causal block's: the diagonal band), and the keys from `end` on are hidden from every row, their probability
    exactly 0 (not computed). A row that sees no key is uniform over all keys in eager attention, so then every key
    counts (end = k_len). All blocks at once: reduced by numpy on the CPU (ten times as fast as torch on bools), on
    the mask's device elsewhere, then one copy to the host."""
    on_cpu = allowed.device.type == "cpu"
    reduced = block_reductions(allowed.numpy() if on_cpu else allowed, step)
    seen, every_key, every_row = reduced if on_cpu else on_host(list(reduced))
    k_len = allowed.shape[1]
    keys = np.arange(1, k_len + 1)  # a key's position + 1
    end = np.where(every_row, (seen * keys).max(1), k_len)  # after the last key seen
    first = np.where(every_key, k_len + 1, keys).min(1) - 1  # the first key hidden from some row, or k_len
    return [(int(f), int(e), bool(every)) for f, e, every in zip(np.minimum(first, end), end, every_row, strict=True)]


def block_reductions(mask: np.ndarray | torch.Tensor, step: int) -> tuple[np.ndarray | torch.Tensor, ...]:
    """A (rows, k_len) bool mask (numpy or torch) reduced over each block of `step` rows: (blocks, k_len) whether
    some row of the block sees each key, (blocks, k_len) whether every row does, (blocks,) whether every row sees
    some key."""
    rows, k_len = mask.shape
    join = np.concatenate if isinstance(mask, np.ndarray) else torch.cat
    whole = rows // step * step  # rows in whole blocks; then the last block's, if fewer
    parts = [mask[:whole].reshape(-1, step, k_len)] * bool(whole) + [mask[whole:][None]] * (whole < rows)
    return (join([part.any(1) for part in parts]), join([part.all(1) for part in parts]),
            join([part.any(2).all(1) for part in parts]))


def on_host(tensors: list[torch.Tensor]) -> tuple[np.ndarray, ...]:
    """Tensors (of one dtype) as host arrays: on the CPU, the tensors themselves; from another device, one copy of
    them all (a GPU waits once)."""
    if tensors[0].device.type == "cpu":
        return tuple(t.numpy() for t in tensors)
    flat = torch.cat([t.reshape(-1) for t in tensors]).cpu()
    parts = flat.split([t.numel() for t in tensors])
    return tuple(part.view(t.shape).numpy() for part, t in zip(parts, tensors, strict=True))


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


class BlockMeans:
    """Block means of a (..., n_rows, n_cols) matrix given a block of rows at a time (its first columns: the
    others 0), each axis cut into `size` blocks (or one a position, where shorter) as `viz.thumbnails.resample`
    cuts it: (..., size, size) float32."""

    def __init__(self, lead: tuple[int, ...], n_rows: int, n_cols: int, size: int) -> None:
        row_starts = block_starts(n_rows, size)  # (blocks + 1,)
        self.row_block = np.searchsorted(row_starts[:-1], np.arange(n_rows), side="right") - 1  # (n_rows,)
        self.row_counts = torch.from_numpy(np.diff(row_starts)).float()
        self.rows_each = n_rows // len(self.row_counts) if n_rows % len(self.row_counts) == 0 else 0  # 0: unequal
        self.col_starts = block_starts(n_cols, size)  # (blocks + 1,)
        self.col_counts = torch.from_numpy(np.diff(self.col_starts)).float()
        self.cols_each = n_cols // len(self.col_counts) if n_cols % len(self.col_counts) == 0 else 0
        self.counts = self.row_counts[:, None] * self.col_counts[None, :]  # (size, size) positions a block
        self.sums = torch.zeros(*lead, len(self.row_counts), len(self.col_counts))

    def restart(self) -> None:
        """Every sum 0 again, in place (where the sums are): one layout and its memory serve every layer of a summary
        (a fresh 1 MB of sums a layer cost 0.1 ms in page faults on the CPU)."""
        self.sums.zero_()

    def add(self, start: int, rows: torch.Tensor) -> None:
        """Rows start.. of the matrix, (..., block, width <= n_cols) float32: columns after `width` are 0. Rows are
        summed into their blocks first (whole rows added: one pass), then the few block rows by columns. The sums
        live where the rows do (the model's device, in a capture's summary)."""
        first, by_row_block = self._row_block_sums(start, rows)
        target = self.sums[..., first : first + by_row_block.shape[-2], :]
        if self.cols_each == 1:  # a block a column
            target[..., : rows.shape[-1]] += by_row_block
        else:
            target += column_block_sums(by_row_block, self.col_starts)

    def add_column_sums(self, start: int, sums: torch.Tensor) -> None:
        """Rows start.. of the matrix given as each row's sums over the column blocks, (..., block, column blocks)."""
        first, by_row_block = self._row_block_sums(start, sums)
        self.sums[..., first : first + by_row_block.shape[-2], :] += by_row_block

    def _row_block_sums(self, start: int, rows: torch.Tensor) -> tuple[int, torch.Tensor]:
        """(the first row block, (..., row blocks, width)): rows start.. summed into the row blocks they fall in
        (those blocks may have rows in other calls too). Moves the sums where the rows are, on first use."""
        if self.sums.device != rows.device:
            self.sums, self.counts = self.sums.to(rows.device), self.counts.to(rows.device)
        n, width = rows.shape[-2:]
        blocks = self.row_block[start : start + n]  # each row's block, ascending
        first, count = int(blocks[0]), int(blocks[-1] - blocks[0]) + 1
        if self.rows_each and start % self.rows_each == 0 and n % self.rows_each == 0:  # whole equal blocks
            return first, rows if self.rows_each == 1 else rows.unflatten(-2, (count, self.rows_each)).sum(-2)
        local = torch.from_numpy(blocks - first).to(rows.device)
        return first, rows.new_zeros(*rows.shape[:-2], count, width).index_add_(-2, local, rows)

    def means(self) -> torch.Tensor:
        """(..., size, size) float32 block means, where the rows were."""
        return self.sums / self.counts

    def result(self) -> torch.Tensor:
        """(..., size, size) float32 block means, on the CPU."""
        return self.means().cpu()


def block_starts(n: int, size: int) -> np.ndarray:
    """(min(n, size) + 1,): the first position of each of `size` blocks of n positions (one a position, where
    n < size), then n; `viz.thumbnails.resample` cuts them so."""
    size = min(n, size)
    return np.append((np.arange(size) * n) // size, n)


@dataclass
class PatternInputs:
    """What attention read, as torch tensors on the model's device (batch kept), until the capture ends; and the
    output, where the capture computed it from the pattern it summarised (`summary_rows`)."""

    query: torch.Tensor  # (batch, heads, q_len, d_head)
    key: torch.Tensor  # (batch, kv_heads, k_len, d_head)
    value: torch.Tensor  # (batch, kv_heads, k_len, d_head)
    scale: float
    mask: torch.Tensor | None  # additive (batch or 1, 1, q_len, >= k_len): the dtype's minimum where hidden
    bias: torch.Tensor | None  # (batch or 1, heads, q_len, k_len) or None
    output: torch.Tensor | None = None  # (batch, q_len, heads, d_head) in the query's dtype, once computed

    def summary_rows(self, source: PatternSource, layout: RowLayout, scratch: Scratch) -> Iterator[ReducedRows]:
        """The row blocks of run 0 of `source` (this layer's) reduced for a summary, computed in `scratch`. For a
        batch of one run they also make attention's output, set as `output` once every block is read: the fused
        kernel then has nothing left to do, and the layer's probabilities are computed once, not once for the
        forward pass and again for the summary."""
        if len(self.query) > 1:
            yield from source[0].reduced_rows(layout, scratch=scratch)
            return
        heads, q_len, d_head = self.query.shape[1:]
        output = torch.empty(heads, q_len, d_head, device=self.query.device)  # float32
        yield from source[0].reduced_rows(layout, self.value[0], output, scratch)
        self.output = output.to(self.query.dtype).transpose(0, 1)[None]

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
