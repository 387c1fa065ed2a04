"""How discovery compares the probe's values: equal up to the rounding of the model's dtype, a scaled copy, a sum."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import nn

_rounding: ContextVar[float] = ContextVar("rounding", default=1e-4)  # `same`'s tolerance while a model is discovered


def rounding_of(model: nn.Module) -> float:
    """The relative tolerance of `same` for a model's values: 1e-4, or 4 steps of its dtype's rounding if coarser
    (bfloat16: 0.03; float16: 0.004)."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return max(1e-4, 4 * torch.finfo(dtype).eps)


@contextmanager
def rounding(model: nn.Module) -> Iterator[None]:
    """While open, `same` compares up to `model`'s rounding."""
    token = _rounding.set(rounding_of(model))
    try:
        yield
    finally:
        _rounding.reset(token)


def same(a: torch.Tensor | None, b: torch.Tensor | None, rtol: float | None = None) -> bool:
    """Whether two values of the probe are one, up to the rounding of the model's dtype (`rounding`: a bfloat16
    model's sums, redone here in float32, differ from its own in the third digit), or up to `rtol`."""
    if a is None or b is None or a.shape != b.shape:
        return False
    rtol = _rounding.get() if rtol is None else rtol
    return bool(torch.allclose(a, b, rtol=rtol, atol=rtol / 10 * max(1.0, float(b.abs().max()))))


def scaled_copy(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether a = c x b for one number c."""
    if a is None or b is None or a.shape != b.shape:
        return False
    c = float((a * b).sum() / (b * b).sum().clamp_min(1e-30))
    return same(a, c * b)


def adds_up(total: torch.Tensor | None, *parts: torch.Tensor | None) -> bool:
    """Whether `total` is the sum of `parts` (each as (positions, d_model), wherever the model flattened them)."""
    if total is None or any(p is None or p.numel() != total.numel() for p in parts):
        return False
    return same(total.reshape(-1, total.shape[-1]), sum(p.reshape(total.shape) for p in parts).reshape(
        -1, total.shape[-1]))
