"""The masks a trace keeps, at the memory they need: a mask whose every diagonal is constant (a causal mask, a
bidirectional one, a sliding window: whether query i sees key k depends on i - k alone) as its diagonals' values, not
its (q_len, k_len) bools (64 MiB at 8,192 tokens), and each layer's pattern source holding its site's mask instead of
a copy of its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.trace.head_roles import ROWS, constant_diagonals
from attention_atlas.model.core.trace.sites import Site


def compact(mask: np.ndarray) -> np.ndarray:
    """A (q_len, k_len) bool mask as an array equal to it: where every diagonal is constant, a read-only view of its
    q_len + k_len - 1 diagonals' values (row i starts one byte further on and reads backwards: mask[i, k] is
    diagonals[k_len - 1 + i - k]); any other mask contiguous (itself where it is). A reader that needs contiguous
    memory (a torch tensor, a C kernel) copies the rows it reads of a view (`as_tensor`, `np.ascontiguousarray`)."""
    q_len, k_len = mask.shape
    if q_len < 2 or k_len < 2 or not constant_diagonals(mask):
        return np.ascontiguousarray(mask, dtype=np.bool_)
    diagonals = np.concatenate([mask[0, ::-1], mask[1:, 0]])  # (k_len + q_len - 1,): by i - k
    kept = np.ndarray(mask.shape, dtype=np.bool_, buffer=diagonals, offset=k_len - 1, strides=(1, -1))
    kept.flags.writeable = False
    return kept


def sharing_site_masks(sources: Mapping[str, PatternSource], masks: Mapping[str, np.ndarray]
                       ) -> dict[str, PatternSource]:
    """Each pattern source (by hook name) holding its site's mask array instead of its own, where the two are equal.
    Each comparison is made once for the memory the two arrays view: the layers of a capture's site each view one
    mask through a view of its own (thirty comparisons of 64 MiB at 8,190 tokens, one second, became one)."""
    equal: dict[tuple[tuple, tuple], bool] = {}

    def sharing(name: str, source: PatternSource) -> PatternSource:
        mask = masks.get(Site.of_pattern(name)[0].name)
        if mask is None or mask is source.allowed:
            return source
        pair = (_memory(source.allowed), _memory(mask))
        if pair not in equal:
            equal[pair] = mask.shape == source.allowed.shape and all(
                np.array_equal(mask[start : start + ROWS], source.allowed[start : start + ROWS])
                for start in range(0, len(mask), ROWS))
        return replace(source, allowed=mask) if equal[pair] else source

    return {name: sharing(name, source) for name, source in sources.items()}


def _memory(array: np.ndarray) -> tuple:
    """What an array views: its first byte's address, its shape, strides and type."""
    return array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str
