"""Attention patterns computed when asked, from what attention read: a pattern costs O(tokens x d_head) to keep.

A fused attention kernel (sdpa, flash) never materialises its probabilities; asking a model for them forces the slow
eager path and O(tokens²) memory per head. Instead the Hugging Face models run their fast attention and, where a
capture asks for `hook_pattern`, keep what attention read: the queries and keys as it received them (rotated, in rotary
models), its scale, any bias added to the scores (T5's relative positions) and the mask it applied.
`PatternSource.pattern(...)` then computes softmax(Q K^T x scale + bias + M) (the scores soft-capped where the model
caps them; a head's sink logit one more key, dropped after) for the heads and query rows a view asks for, exactly as
eager attention does (float32: equal to eager's to 1e-5, tests/model/test_hf_heads.py). Arrays may keep a leading batch
dimension until a Trace is made (`source[0]` takes one run of a batch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.attention import native, row_reduction
from attention_atlas.model.core.attention.arrays import Array, Kept, RowScaled, as_index, as_tensor, run_of
from attention_atlas.model.core.attention.block_means import BlockMeans
from attention_atlas.model.core.attention.row_reduction import ROW_STATISTICS, ReducedRows, RowLayout, reduce_rows
from attention_atlas.model.core.attention.scratch import Scratch, head_passes
from attention_atlas.model.core.attention.sinks import LOG2_E, sink_bits

ROW_BLOCK = 128  # query rows computed at once on the CPU (and MPS), at most: fewer rows skip more of a causal mask's
# hidden keys, at a fixed cost a block (128 was the fastest at 512 and 2,048 tokens)
SEEN_ROW_BLOCK = 512  # and where every row sees every key (an encoder's text, cross-attention): no key for fewer rows
# to skip, so fewer blocks' fixed costs (MiniLM's summary at 512 tokens: 4% of its frame's run)
BLOCK_BYTES = 32 << 20  # and fewer rows where one (heads, rows, k_len) float32 block would be larger (long texts)
PASS_BYTES = 16 << 20  # the CPU's kernel reads a block's heads in passes of whole key heads' groups, each pass's scores
# at most this, still in the L3 cache for the kernel and P V (SmolLM2 at 8,190 tokens, 32 MiB of L3: 56.3 -> 52.6 s)
DEVICE_ROW_BLOCK = 8192  # on CUDA (a block costs its twenty-odd kernel launches whatever its size): rows a block
DEVICE_BLOCK_BYTES = 1 << 30  # and the memory a block works in at most (`WORKING_FLOATS` float32 blocks)
FREE_SHARE = 0.25  # nor more than this share of the memory the GPU has free when a pass starts
WORKING_FLOATS = 4  # float32 (heads, rows, k_len) blocks' worth of memory the torch ops work in: the scores, the
# probabilities, their bfloat16 copy for the matrix products, the reductions' temporaries
EXP_FLOOR = -112.0  # scores in bits (x LOG2_E: exp2 took a quarter of exp's time on the CPU), less each row's
# greatest, are raised to this before exp2 (exp2 of numbers under -126, float32's smallest normal, took 4x as long): a
# key's probability then differs from eager's by under 1e-33, except hidden keys', set to exactly 0.
_TORCH = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}


def block_rows(device_type: str, heads: int, k_len: int, free_bytes: int | None = None,
               every_key_seen: bool = False) -> int:
    """Query rows a block of (heads, rows, k_len) scores, 16 at least: on CUDA, as many as `DEVICE_BLOCK_BYTES` or
    `FREE_SHARE` of `free_bytes` hold, up to `DEVICE_ROW_BLOCK`; elsewhere up to `ROW_BLOCK` (`SEEN_ROW_BLOCK` where
    every row sees every key), one float32 block at most `BLOCK_BYTES`."""
    if device_type == "cuda" and free_bytes is not None:
        working = min(int(free_bytes * FREE_SHARE), DEVICE_BLOCK_BYTES)
        budget, most = working // WORKING_FLOATS, DEVICE_ROW_BLOCK
    else:
        budget, most = BLOCK_BYTES, SEEN_ROW_BLOCK if every_key_seen else ROW_BLOCK
    return int(np.clip(budget // (4 * heads * k_len), 16, most))


def kept_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a capture keeps the queries and keys of a model running in `dtype` on `device` in: bfloat16 off the
    CPU where the model runs in it (tensor cores: `products_dtype`), else float32 (what the CPU's kernel reads)."""
    return torch.bfloat16 if dtype == torch.bfloat16 and device.type != "cpu" else torch.float32


@dataclass(frozen=True)
class PatternSource:
    """One layer's attention pattern, not yet computed: (heads, q_len, k_len) on demand, on `device`. A trace keeps
    host numpy arrays; while a capture summarises its run (model/core/attention/summary.py) the arrays are the
    capture's own tensors, still on the model's device. Either way the probabilities are computed on `device`."""

    query: Kept  # (heads, q_len, d_head): what attention read (rotated in rotary models); float32, or bfloat16 on
    # a GPU while a bfloat16 model's capture summarises (`kept_dtype`); a long text's kept on the host as RowScaled
    key: Kept  # (kv_heads, k_len, d_head); query head h reads key head h // (heads / kv_heads)
    scale: float  # the scores' factor (1/sqrt(d_head) in most models; T5: 1)
    allowed: Array  # (q_len, k_len) bool: True where the mask let the query see the key
    bias: Array | None = None  # (heads, q_len, k_len) added to the scores: T5's and ALiBi (one tensor every layer
    # shares), DeBERTa's position terms (each layer's own)
    softcap: float | None = None  # scores capped to c tanh(score / c) before the mask (Gemma 2's logit soft-capping)
    sinks: Array | None = None  # (heads,) float32: a learned sink logit a head (GPT-OSS), one more key in every row's
    # softmax whose probability is dropped, as eager attention drops it: a row sums to 1 less the sink's share
    device: str = "cpu"  # where the probabilities are computed: the model's device

    def __getitem__(self, index: int) -> PatternSource:  # run `index` of a batch (the arrays' leading dimension)
        return replace(self, query=self.query[index], key=self.key[index], allowed=run_of(self.allowed, index),
                       bias=None if self.bias is None else run_of(self.bias, index))

    @property
    def shape(self) -> tuple[int, int, int]:
        """(heads, q_len, k_len) of the pattern."""
        return self.query.shape[0], self.query.shape[1], self.key.shape[1]

    def arrays(self) -> list[Array]:
        """The arrays held, tensors while a capture summarises (the bias and mask may be shared: count them once)."""
        kept = [a for a in (self.query, self.key) for a in (a.arrays() if isinstance(a, RowScaled) else (a,))]
        return [*kept, self.allowed, *(a for a in (self.bias, self.sinks) if a is not None)]

    def pattern(self, heads: Any = slice(None), rows: Any = slice(None), dtype: type = np.float16) -> np.ndarray:
        """(len(heads), len(rows), k_len) probabilities of the chosen heads and query rows (all by default)."""
        head_ids, row_ids = self._ids(heads, rows)
        out = np.zeros((len(head_ids), len(row_ids), self.key.shape[1]), dtype=dtype)
        for start, probabilities in self.blocks(head_ids, row_ids):
            rows, seen = probabilities.shape[1:]
            out[:, start : start + rows, :seen] = probabilities.to(_TORCH[np.dtype(dtype)]).cpu().numpy()
        return out

    def sink_shares(self, heads: Any = slice(None), rows: Any = slice(None)) -> np.ndarray:
        """(len(heads), len(rows)) float32: the share of each row its head's sink took, 1 less its sum (0: no sink)."""
        return np.zeros(tuple(len(ids) for ids in self._ids(heads, rows)), np.float32) if self.sinks is None else \
            1 - self.pattern(heads, rows, np.float32).sum(-1)

    def shrunk(self, size: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(heads, size, size) float32: query `rows` x key `cols` shrunk by block means (`viz.thumbnails.resample`'s
        blocks), a block of rows at a time; where fewer than `size`, the rows x cols themselves (caller resamples)."""
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
        return np.atleast_1d(np.arange(self.query.shape[0])[heads]), np.atleast_1d(np.arange(self.query.shape[1])[rows])

    @property
    def products_dtype(self) -> torch.dtype:
        """What a summary's Q K^T and P V run in: bfloat16 where the queries kept are (`kept_dtype`), else float32.
        The softmax and sums are float32 either way; the patterns a page reads are float32 products."""
        return torch.bfloat16 if isinstance(self.query, torch.Tensor) and self.query.dtype == torch.bfloat16 \
            else torch.float32

    def reduced_rows(self, layout: RowLayout, value: torch.Tensor | None = None, output: torch.Tensor | None = None,
                     scratch: Scratch | None = None) -> Iterator[ReducedRows]:
        """Every head's pattern reduced a block of query rows at a time (row_reduction.py), for the pass that summarises
        a layer (summary.py). Given `value` (kv_heads, k_len, d_head) on `device`, each block's attention output is
        written into `output` (heads, q_len, d_head) too: the layer's attention computed once for both. On the CPU the
        native kernel makes a block's probabilities and reductions in one pass over each row, elsewhere (or where it
        did not compile) torch ops, products in `products_dtype`. Nothing waits for the device. `scratch`: buffers."""
        scratch = scratch or Scratch()
        kernel = native.attention_rows() if torch.device(self.device).type == "cpu" else None
        dtype = torch.float32 if kernel is not None else self.products_dtype
        value = None if value is None else value.to(dtype).contiguous()
        blocks = (self._native_blocks(kernel, layout, scratch, value, output) if kernel is not None
                  else self._torch_blocks(layout, scratch, dtype))
        group = len(self.query) // len(self.key)  # query heads a key (and value) head serves
        for heads, start, p, reduced in blocks:
            if value is not None and p is not None:  # (p None: the kernel wrote it) a value head a group of heads
                if dtype != p.dtype:  # rounded, as eager attention's probabilities before its P V
                    p = scratch.products(p.shape, p.device, dtype).copy_(p)
                values = value[heads.start // group : heads.stop // group, : p.shape[-1]]
                grouped = torch.matmul(p.view(len(values), -1, p.shape[-1]), values)
                output[heads, start : start + p.shape[1]] = grouped.view(*p.shape[:2], -1)
            if reduced is not None:
                yield reduced

    def _native_blocks(self, kernel: Callable, layout: RowLayout, scratch: Scratch, value: torch.Tensor | None = None,
                       output: torch.Tensor | None = None
                       ) -> Iterator[tuple[slice, int, torch.Tensor | None, ReducedRows | None]]:
        """(a pass's heads, the block's first row, their probabilities (heads, rows, seen), the block reduced after its
        last pass, else None) from the native kernel, in passes of heads (`PASS_BYTES`). It makes the scores too where
        it can (AVX-512; no bias or soft cap), and given `value`, writes into `output` itself (p yielded as None)."""
        heads, positions = self.query.shape[0], np.arange(self.query.shape[1])
        makes_scores = kernel.from_queries is not None and self.bias is None and self.softcap is None
        writes = makes_scores and value is not None  # the output too, from the values
        group = heads // len(self.key)  # query heads a key (and value) head serves
        reduced: dict[str, torch.Tensor] = {}  # the block's: its passes write their heads' part (the rollout: add)
        sinks = sink_bits(self.sinks, np.arange(heads), torch.device("cpu"))
        for part, start, first, _, scores, allowed, query, keys in self._scores(
                np.arange(heads), positions, scratch, torch.float32, PASS_BYTES, multiply=not makes_scores):
            n, width = scores.shape[1:]
            if part.start == 0:  # the kernel's statistics and normalisers row by row, the shares on induction targets
                reduced = {"thumbnail": torch.empty(heads, n, len(layout.thumbnail_starts) - 1),
                           "statistics": torch.empty(heads, n, ROW_STATISTICS), "targets": torch.empty(heads),
                           "normalisers": torch.empty(heads, n)}
            rollout = None if layout.rollout_starts is None else torch.empty(n, len(layout.rollout_starts) - 1)
            into = (value[part.start // group : part.stop // group], output[part, start : start + n]) if writes \
                else None
            native.run_kernel(kernel, scores, allowed, first, start, layout.positional, EXP_FLOOR,
                              layout.thumbnail_starts, reduced["thumbnail"][part], layout.rollout_starts, rollout,
                              reduced["statistics"][part], (query, keys) if makes_scores else None, into,
                              None if sinks is None else sinks[part].contiguous(), reduced["normalisers"][part])
            if rollout is not None:  # the heads' sums: this pass's heads added to the earlier passes'
                reduced["rollout"] = rollout if part.start == 0 else reduced["rollout"].add_(rollout)
            if layout.targets is not None:  # read from the probabilities the kernel left in `scores`
                reduced["targets"][part] = row_reduction.target_sums(start, scores, layout)
            whole = None if part.stop < heads else ReducedRows(  # after the block's last pass
                start, row_reduction.statistic_sums(start, reduced["statistics"], reduced["targets"], layout),
                reduced["thumbnail"], reduced.get("rollout"), row_reduction.sees_ahead(start, n, first, width),
                reduced["normalisers"])
            yield part, start, None if writes else scores, whole

    def _torch_blocks(self, layout: RowLayout, scratch: Scratch, dtype: torch.dtype = torch.float32
                      ) -> Iterator[tuple[slice, int, torch.Tensor, ReducedRows]]:
        """`_native_blocks` made with torch ops, on `device`, Q K^T in `dtype`, every head in one pass."""
        heads, positions = np.arange(len(self.query)), np.arange(self.query.shape[1])
        for start, first, p, shifted, total, norm in self._blocks(heads, positions, scratch, dtype):
            # -sum p log2 p, log2 p = shifted - log2 Z: log2 Z x sum p (1 without a sink) - sum p shifted
            log_total = total.log2_() if self.sinks is None else total.log2_().mul_(p.sum(-1))
            entropy = log_total.sub_(shifted.mul_(p).sum(-1))  # (heads, rows)
            ahead = row_reduction.sees_ahead(start, p.shape[1], first, p.shape[2])
            yield slice(0, len(p)), start, p, reduce_rows(start, p, layout, entropy, ahead, norm)

    def blocks(self, head_ids: np.ndarray, row_ids: np.ndarray) -> Iterator[tuple[int, torch.Tensor]]:
        """(offset in row_ids, float32 probabilities (heads, block, seen) on `device`) for blocks of query rows
        (`block_rows`): softmax(Q K^T x scale + bias + M), as eager computes it, for keys 0..seen-1; the keys after,
        hidden from every row of the block (a causal mask's future), not computed: exactly 0, as in eager. A block is
        scratch the next one overwrites: read or copy it before asking for the next."""
        for start, _, p, *_ in self._blocks(head_ids, row_ids, Scratch()):
            yield start, p

    def _blocks(self, head_ids: np.ndarray, row_ids: np.ndarray, scratch: Scratch, dtype: torch.dtype = torch.float32
                ) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """`blocks`, with the block's `first` (`_scores`), the scores (bits; Q K^T in `dtype`) less each row's greatest
        or its head's sink (<= 0, floored at EXP_FLOOR), in `scratch`, each row's sum of 2^scores (heads, rows), Z
        (the sink's term added), and its log2 normaliser, greatest + log2 Z (NaN where a row sees no key)."""
        device = torch.device(self.device)
        sinks = sink_bits(self.sinks, head_ids, device)
        for _, start, first, every_row, scores, allowed, *_ in self._scores(head_ids, row_ids, scratch, dtype):
            end = scores.shape[-1]
            # the band's mask as floats: adding and multiplying took a seventh of masked_fill's time on the CPU
            keep = as_tensor(allowed[:, first:end], device).float() if end > first else None  # (block, band): 1 seen
            if keep is not None:
                scores[..., first:end] += (1 - keep) * torch.finfo(torch.float32).min
            top = scores.amax(-1, keepdim=True)  # (heads, block, 1): each row's greatest score, or its head's sink
            top = top if sinks is None else torch.maximum(top, sinks[:, None, None])
            scores -= top  # 0 at most
            scores.clamp_(min=EXP_FLOOR)
            # softmax as exp2, sum, divide: torch's fused softmax (its exp) took 1.7x as long on the CPU
            p = torch.exp2(scores, out=scratch.probabilities(scores.shape, device))
            total = p.sum(-1)  # (heads, block)
            if sinks is not None:  # the sink's 2^x joins each row's sum, its probability dropped
                total += torch.exp2((sinks[:, None] - top[..., 0]).clamp_(min=EXP_FLOOR))
            p /= total[..., None]
            norm = top[..., 0] + total.log2()  # (heads, block): p = 2^(score - norm) for every key seen
            if keep is not None:
                if not every_row and sinks is None:  # a row that sees no key stays uniform, as in eager (a broadcast
                    # mask: a boolean index would wait for the device); with a sink, the sink takes it all
                    unseen = ~as_tensor(allowed, device).any(-1, keepdim=True)  # (block, 1)
                    keep.masked_fill_(unseen, 1.0)
                    norm.masked_fill_(unseen[:, 0], float("nan"))
                p[..., first:end] *= keep  # a hidden key's probability exactly 0, as in eager attention
            yield start, first, p, scores, total, norm

    def _scores(self, head_ids: np.ndarray, row_ids: np.ndarray, scratch: Scratch, dtype: torch.dtype,
                pass_bytes: int | None = None, multiply: bool = True
                ) -> Iterator[tuple[slice, int, int, bool, torch.Tensor, Array, torch.Tensor, torch.Tensor]]:
        """For each block of query rows (`block_rows`), in passes of its heads: (the pass's heads as positions in
        head_ids, the block's offset in row_ids, `first`, whether every row sees some key, the pass's scores, the
        block's rows of the mask (block, k_len), the pass's queries in bits (heads, block, d_head) and key heads
        (kv_heads, d_head, k_len), contiguous). The scores (heads, block, end): eager's before the mask, in bits,
        float32, in `scratch` on `device` (Q K^T in `dtype`; not `multiply`: left to the caller); every row sees every
        key before `first`, keys from `end` on are hidden from every row, not computed (`mask_spans`). A pass: whole
        groups of query heads reading one key head, its scores at most `pass_bytes` (None: every head). For a
        summary's every head and consecutive rows nothing waits for the device."""
        device = torch.device(self.device)
        query, key, bias = self.query, self.key, self.bias  # (heads, q_len, d_head), (kv_heads, k_len, d_head)
        if len(head_ids) < len(query) or bool((np.asarray(head_ids) != np.arange(len(query))).any()):
            heads = np.asarray(head_ids)  # some heads, a key head each (head h reads h // (heads / kv_heads)), chosen
            query, key = query[heads], key[heads // (len(query) // len(key))]  # where they are: only theirs converted
            bias = bias[torch.from_numpy(heads).to(device)] if isinstance(bias, torch.Tensor) else bias
        query, key = as_tensor(query, device).to(dtype), as_tensor(key, device).to(dtype)
        key = key.transpose(1, 2).contiguous()  # (kv_heads, d_head, k_len); a group of query heads reads each
        group = len(query) // len(key)
        contiguous = len(row_ids) > 0 and bool((np.diff(row_ids) == 1).all())
        selected = slice(row_ids[0], row_ids[-1] + 1) if contiguous else row_ids  # a slice copies nothing
        on_host_already = isinstance(self.allowed, np.ndarray)  # a trace's: reduced where it is, not sent to the device
        mask = as_tensor(self.allowed[selected], torch.device("cpu") if on_host_already else device)
        every_key_seen = device.type != "cuda" and scratch.every_key_seen(mask)  # (a GPU's blocks are larger anyway)
        step = block_rows(device.type, len(head_ids), key.shape[-1], scratch.free_bytes(device), every_key_seen)
        step = step if multiply else native.even_tiles(step, 4 * len(head_ids) * key.shape[-1], BLOCK_BYTES)
        spans = scratch.spans(mask, step) if len(row_ids) else []
        for (first, end, every_row), start in zip(spans, range(0, len(row_ids), step), strict=True):
            block = row_ids[start : start + step]
            rows = slice(block[0], block[-1] + 1) if contiguous else block
            scaled = query[:, as_index(rows, device)] * (self.scale * LOG2_E)  # (heads, block, d_head): bits
            for part in head_passes(len(key), group, 4 * len(block) * end, pass_bytes):
                scores = scratch.scores((part.stop - part.start, len(block), end), device)
                keys = key[part.start // group : part.stop // group]
                if not multiply:  # (the queries: a view of the model's (q_len, heads, d_head) layout, made contiguous)
                    yield part, start, first, every_row, scores, self.allowed[rows], scaled[part].contiguous(), keys
                    continue
                products = scores if dtype == torch.float32 else scratch.products(scores.shape, device, dtype)
                # a group of query heads reads one key head: (kv_heads, group x block, end) is (heads, block, end)
                grouped = scaled[part].reshape(len(keys), -1, query.shape[-1])
                torch.matmul(grouped, keys[..., :end], out=products.view(len(keys), -1, end))
                if products is not scores:
                    scores.copy_(products)
                if self.softcap is not None:  # c tanh(s / c) of the scores s in nats, kept in bits
                    scores.mul_(1 / (LOG2_E * self.softcap)).tanh_().mul_(self.softcap * LOG2_E)
                if bias is not None:  # in nats, as the scores were
                    rows_bias = (bias[np.ix_(head_ids[part], block, np.arange(end))] if isinstance(bias, np.ndarray)
                                 else bias[part, as_index(rows, device), :end])
                    scores.add_(as_tensor(rows_bias, device).float(), alpha=LOG2_E)
                yield part, start, first, every_row, scores, self.allowed[rows], scaled[part], keys

