"""How a Hugging Face run keeps its attention: float16, and causal patterns as lower triangles, converted in
the hook as soon as the module returns them (torch, on the model's device), in the layout of
`model.core.trace.pack_lower_triangle`."""

from __future__ import annotations

import functools
from typing import Any

import torch

from model.core.capture import ModuleTap
from model.core.trace import PATTERN_SUFFIX


def stored_pattern(tap: ModuleTap, lower_triangle: bool) -> ModuleTap:
    """Attention as a Trace keeps it, converted as soon as the hook sees it: float16, and for a
    causal site only the lower triangle."""

    def read(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
        weights = tap.read(args, kwargs, out).to(torch.float16)  # (batch, heads, q_len, k_len)
        if lower_triangle:
            flat = _tril_flat_indices(weights.size(-1), weights.device)
            weights = weights.flatten(-2)[..., flat]  # (batch, heads, q_len * (q_len + 1) / 2)
        return weights

    return ModuleTap(tap.module, read)


@functools.lru_cache(maxsize=8)
def _tril_flat_indices(n: int, device: torch.device) -> torch.Tensor:
    """Positions of the lower triangle in a flattened n x n matrix, row by row (cached: every layer asks)."""
    rows, cols = torch.tril_indices(n, n, device=device)
    return rows * n + cols


def is_self_attention_pattern(name: str) -> bool:
    return name.endswith(".attn." + PATTERN_SUFFIX)
