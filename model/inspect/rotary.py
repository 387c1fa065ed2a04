"""A rotary model's own rotation tables, read from its rotary embedding module (never changed)."""

from __future__ import annotations

import inspect

import torch
from torch import nn


def rotary_tables(model: nn.Module, length: int, layer_type: str | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(cos, sin, interleaved): cos and sin (length, r) float64 on the CPU at positions 0..length-1, r the dimensions
    of a head it rotates (all of them, or a part); interleaved: pairs are dimensions (2i, 2i + 1) (GPT-J, Cohere),
    else (i, i + r/2) (Llama and most). Read from what the module returns, whatever its order and layout: the table
    that is 0 at position 0 is the sine; cos repeats within each pair, or holds one number a pair (GPT-J), then
    spread to both; or one complex table e^{i position θ} of the pairs (2i, 2i + 1) (Llama 4). layer_type: the
    layer's kind where the model rotates kinds differently (Gemma 3's local layers)."""
    rotary = next(m for m in model.base_model.modules() if "rotary" in type(m).__name__.lower())
    kinds = "layer_type" in inspect.signature(rotary.forward).parameters
    extra = {"layer_type": layer_type or "full_attention"} if kinds else {}
    device = next(iter(rotary.buffers()), torch.zeros(0)).device
    with torch.inference_mode():
        positions = torch.arange(max(length, 2), device=device)[None]  # (1, len)
        tables = rotary(torch.zeros(1, 1, device=device), positions, **extra)
    if isinstance(tables, torch.Tensor) and tables.is_complex():  # (1, len, r / 2): cos + i sin of each pair
        turns = tables[0].cpu().to(torch.complex128)
        return turns.real.repeat_interleave(2, -1)[:length], turns.imag.repeat_interleave(2, -1)[:length], True
    first, second = (t[0].double().cpu() for t in tables)
    cos, sin = (second, first) if bool((first[0].abs() < 1e-9).all()) else (first, second)
    half = cos.shape[-1] // 2
    if torch.allclose(cos[:, :half], cos[:, half:]):
        return cos[:length], sin[:length], False
    if torch.allclose(cos[:, 0::2], cos[:, 1::2]):
        return cos[:length], sin[:length], True
    if _pairs_halves(rotary, cos[1], sin[1]):  # one number a pair (i, i + r/2): GPT-OSS
        return torch.cat([cos, cos], -1)[:length], torch.cat([sin, sin], -1)[:length], False
    return cos.repeat_interleave(2, -1)[:length], sin.repeat_interleave(2, -1)[:length], True  # (2i, 2i + 1): GPT-J


def _pairs_halves(rotary: nn.Module, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether the model's own `apply_rotary_pos_emb` (in the rotary module's source file) turns a table of one number
    a pair (r / 2,) on the pairs (i, i + r/2), not (2i, 2i + 1): read from what it does to one probe vector."""
    apply = getattr(inspect.getmodule(type(rotary)), "apply_rotary_pos_emb", None)
    if apply is None:  # no such function beside the rotary module: nothing read says halves
        return False
    names = list(inspect.signature(apply).parameters)
    probe = torch.linspace(-1, 1, 2 * len(cos), dtype=torch.float64)[None, None, None]  # (1, 1, 1, r)
    given = {"cos": cos[None, None], "sin": sin[None, None]} | {n: probe for n in ("q", "k", "tensor") if n in names}
    try:
        out = apply(**given)
    except (TypeError, RuntimeError):
        return False
    out = (out[0] if isinstance(out, tuple) else out)[0, 0, 0]
    return bool(torch.allclose(out, rotate(probe[0, 0, 0], torch.cat([cos, cos]), torch.cat([sin, sin]), False)))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """x (len, d_head) with its first r dimensions rotated by cos, sin (len, r); the rest left as they are."""
    r = cos.shape[-1]
    turned, kept = x[..., :r], x[..., r:]
    if interleaved:
        partner = torch.stack([-turned[..., 1::2], turned[..., 0::2]], -1).flatten(-2)
    else:
        partner = torch.cat([-turned[..., r // 2:], turned[..., : r // 2]], -1)
    return torch.cat([turned * cos + partner * sin, kept], -1)
