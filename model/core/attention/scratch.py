"""The memory a pattern's blocks are computed in, which keys each block of query rows must mask, and a block's heads
in passes."""

from __future__ import annotations

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import on_host


class Scratch:
    """The buffers every block of a pattern is computed in (its float32 scores; for torch's softmax, its float32
    probabilities; for bfloat16 matrix products, a bfloat16 copy), grown when a block needs more: on the CPU a fresh
    block-sized tensor for every block cost, in page faults, about as much again as the block's arithmetic. One pass
    over many layers keeps one (a capture's summary), so all its blocks reuse the same memory, the GPU's free memory
    that sizes its blocks (model/core/attention/source.py `block_rows`) is read once, and each mask's spans
    (`mask_spans`) are found once for every layer that reads it."""

    def __init__(self) -> None:
        self._memory: list[torch.Tensor | None] = [None, None, None]  # scores, probabilities, products: (n,) each
        self._spans: dict[tuple, tuple[torch.Tensor, list[tuple[int, int, bool]]]] = {}  # by mask: (mask, spans)
        self._free: dict[torch.device, int] = {}  # bytes free on a GPU when this scratch first computed there
        self._every_key: dict[tuple, tuple[torch.Tensor, bool]] = {}  # by mask: (mask, every row sees every key)

    def scores(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """A contiguous float32 tensor of `shape` on `device` for a block's scores, overwritten by the next call."""
        return self._buffer(0, shape, device, torch.float32)

    def probabilities(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """The same for a block's probabilities."""
        return self._buffer(1, shape, device, torch.float32)

    def products(self, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The same in `dtype` for a block's matrix products in it (Q K^T, then the probabilities that multiply V)."""
        return self._buffer(2, shape, device, dtype)

    def _buffer(self, index: int, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        size, memory = int(np.prod(shape)), self._memory[index]
        if memory is None or len(memory) < size or memory.device != device or memory.dtype != dtype:
            self._memory[index] = memory = None  # the old buffer freed before the new one is made
            memory = self._memory[index] = torch.empty(size, device=device, dtype=dtype)
        return memory[:size].view(shape)

    def free_bytes(self, device: torch.device) -> int | None:
        """The bytes free on a CUDA `device` when this scratch first asked (the driver's free memory and what torch
        holds unused), read once a pass; None elsewhere."""
        if device.type != "cuda":
            return None
        if device not in self._free:
            free, _ = torch.cuda.mem_get_info(device)
            self._free[device] = free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return self._free[device]

    def spans(self, allowed: torch.Tensor, step: int) -> list[tuple[int, int, bool]]:
        """`mask_spans(allowed, step)`, remembered while this scratch lives. The mask is known by its memory, which
        the remembered entry keeps alive (so no other tensor can take its place), as every layer of a model reads
        the same mask through views of its own."""
        key = (*_memory(allowed), step)
        if key not in self._spans:
            self._spans[key] = (allowed, mask_spans(allowed, step))
        return self._spans[key][1]

    def every_key_seen(self, allowed: torch.Tensor) -> bool:
        """Whether every row of a (rows, k_len) bool mask sees every key, remembered as `spans` are (once a pass)."""
        key = _memory(allowed)
        if key not in self._every_key:
            self._every_key[key] = (allowed, bool(allowed.all()))
        return self._every_key[key][1]


def _memory(tensor: torch.Tensor) -> tuple:
    """What a tensor views: its first element's address, its device, shape and strides."""
    return tensor.data_ptr(), tensor.device, tuple(tensor.shape), tensor.stride()


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


def head_passes(kv_heads: int, group: int, head_bytes: int, most: int | None) -> list[slice]:
    """The query heads of a block (kv_heads x group, a group reading each key head) in passes of whole groups, as
    even as can be, each pass's scores (`head_bytes` a head) at most `most` bytes, or one group where a group is
    larger; every head in one pass where `most` is None."""
    if most is None:
        return [slice(0, kv_heads * group)]
    count = -(-kv_heads // max(1, most // (group * head_bytes)))  # passes
    each = -(-kv_heads // count)  # key heads a pass
    return [slice(first * group, min(first + each, kv_heads) * group) for first in range(0, kv_heads, each)]
