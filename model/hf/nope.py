"""Llama 4's layers without rotary positions (NoPE: `no_rope_layers[i] == 0`), the temperature tuning of their queries
(`attn_temperature_tuning`) and the rotary layers' L2 norm of q and k (`use_qk_norm`): which layers, and in words, for
the model card and the Positional encoding page (read from the config), and for Step through's recomputation of a head
(read from its attention module). Every other model has none of them."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn


def nope_layers(config: Any) -> list[int]:
    """The layers that rotate neither q nor k ([] where every layer rotates, or the config says nothing of it)."""
    flags = getattr(config, "no_rope_layers", None)
    return [i for i, rotates in enumerate(flags or []) if not rotates]


def tuned_temperature(config: Any) -> bool:
    """Whether the NoPE layers scale their queries by position (temperature tuning)."""
    return bool(nope_layers(config)) and bool(getattr(config, "attn_temperature_tuning", False))


def qk_normed(config: Any) -> bool:
    """Whether the rotary layers L2-normalise q and k after the rotation (Llama 4's qk-norm)."""
    return bool(getattr(config, "no_rope_layers", None)) and bool(getattr(config, "use_qk_norm", False))


def temperature_words(config: Any) -> str:
    """The query scale of a NoPE layer at position p, in words."""
    floor, scale = int(config.floor_scale), float(config.attn_scale)
    return (f"its queries are multiplied by 1 + {scale:g}·ln(1 + ⌊(p + 1) / {floor}⌋) at position p (temperature "
            f"tuning: 1 up to position {floor - 2}, then growing slowly, so far tokens' scores stay sharp)")


def nope_words(config: Any) -> str:
    """The model card's and Positional page's sentence on the NoPE layers ("" where there are none)."""
    layers = nope_layers(config)
    if not layers:
        return ""
    named = f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"
    words = (f"{named}: q and k are not rotated, so their scores carry no position and order reaches them only "
             "through the causal mask")
    return words + ("; " + temperature_words(config) if tuned_temperature(config) else "")


def qk_norm_words(config: Any) -> str:
    """The model card's sentence on qk-norm ("" where the model does not norm q and k)."""
    if not qk_normed(config):
        return ""
    return ("the rotary layers' q and k are L2-normalised after the rotation (each head's vector divided by its root "
            "mean square), so a score is √d_head times the cosine of q and k")


def rotates(attention: nn.Module) -> bool:
    """Whether the attention module rotates its q and k (False in a NoPE layer: Llama 4's, SmolLM3's `use_rope`)."""
    return bool(getattr(attention, "use_rope", True))


def l2_norm_eps(attention: nn.Module) -> float | None:
    """The ε of the weightless norm the module applies to q and k after rotating them (Llama 4's qk-norm:
    x / √(mean x² + ε)); None where it has none."""
    norm = getattr(attention, "qk_norm", None)
    return float(norm.eps) if isinstance(norm, nn.Module) and "L2Norm" in type(norm).__name__ else None


def query_scales(attention: nn.Module, length: int) -> np.ndarray | None:
    """(length,) float32: the factor the module multiplies the query at each position 0..length-1 by (Llama 4's
    temperature tuning of its NoPE layers); None where it scales none."""
    if not getattr(attention, "attn_temperature_tuning", False) or rotates(attention):
        return None
    positions = np.arange(length, dtype=np.float64)
    factors = np.log1p(np.floor((positions + 1.0) / attention.floor_scale)) * attention.attn_scale + 1.0
    return factors.astype(np.float32)
