"""A norm's output from its `hook_normalized`: as in TransformerLens, that hook is the norm's input (centred, for
LayerNorm) divided by its `hook_scale`, before the norm's weight and bias; what the next block reads is
hook_normalized x weight + bias (x 1 + weight in Gemma). The weights are read from what the loaded model's norm does,
for any family (never changed)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.hf.placement import computing_device, exclusive
from attention_atlas.model.hf.taps import norm_eps


def norm_module(runner: Runner, hook_name: str) -> nn.Module:
    """The norm whose `hook_normalized` is `hook_name` ("decoder.3.ln1.hook_normalized")."""
    model = getattr(runner, "model", None)
    if model is not None:  # a Hugging Face model: the tap is on the norm module itself (model/hf/taps.py)
        return runner.taps[hook_name].module  # type: ignore[attr-defined]
    point = runner.toy.model.hook_points[hook_name]  # type: ignore[attr-defined]  # a from-scratch model
    return next(module for module in runner.toy.model.modules()  # type: ignore[attr-defined]
                if getattr(module, "hook_normalized", None) is point)


def norm_affine(module: nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """(gain, bias), each (d,) float64: what a norm multiplies its normalised input by and adds, read from what the
    module does (any formula: weight, Gemma's 1 + weight, OLMo's none), by normalising a probe e (`_probe`) and -e,
    whose mean is 0 and whose mean square is 1, so that each comes out as ±e / sqrt(1 + eps) x gain + bias."""
    if isinstance(module, nn.Identity):  # in a norm's place (ModernBERT's first layer): nothing is done
        return np.ones(1), np.zeros(1)
    e = _probe(_width(module))
    plus, minus = _apply(module, e), _apply(module, -e)
    gain = (plus - minus) / 2 * np.sqrt(1 + norm_eps(module)) / e.numpy()
    return gain, (plus + minus) / 2


def norm_centres(module: nn.Module) -> bool:
    """Whether the norm subtracts its input's mean (LayerNorm) or not (RMSNorm), read from what it does: a constant
    input, centred, is 0, so a LayerNorm returns its bias for it, an RMSNorm its gain."""
    if isinstance(module, nn.Identity):
        return False
    gain, bias = norm_affine(module)
    out = _apply(module, torch.full((_width(module),), 3.0, dtype=torch.float64))
    return bool(np.abs(out - bias).max() < 1e-2 * max(np.abs(gain).max(), 1.0))


def _probe(width: int) -> torch.Tensor:
    """(width,) float64 with no zero entry, mean 0 and mean square 1 (width >= 2): (1, -1, 1, -1, ...) for an even
    width; for an odd one (1, 1, -2) followed by (1, -1, ...), scaled by sqrt(width / (width + 3)). Width 1 has no
    zero-mean probe: (1,) (an RMSNorm's gain is still read; a LayerNorm of one value returns its bias)."""
    if width % 2 == 0:
        return torch.tensor([1.0, -1.0], dtype=torch.float64).repeat(width // 2)
    if width == 1:
        return torch.ones(1, dtype=torch.float64)
    rest = torch.tensor([1.0, -1.0], dtype=torch.float64).repeat((width - 3) // 2)
    return torch.cat([torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64), rest]) * np.sqrt(width / (width + 3))


def _width(module: nn.Module) -> int:
    parameter = next(iter(module.parameters()), None)
    if parameter is not None:
        return parameter.shape[-1]
    return module.normalized_shape[-1]  # pyright: ignore[reportReturnType] torch's __getattr__


def _apply(module: nn.Module, x: torch.Tensor) -> np.ndarray:
    """The norm's output for x (d,), float64 numpy, computed in the module's own dtype and device."""
    parameter = next(iter(module.parameters()), None)
    dtype = parameter.dtype if parameter is not None else torch.float32
    with torch.no_grad(), exclusive(module):
        return module(x.to(dtype=dtype, device=computing_device(module))).double().cpu().numpy()


def norm_output(runner: Runner, hook_name: str, normalized: np.ndarray) -> np.ndarray:
    """(pos, d_model) float32: the norm's output for its `normalized` values (pos, d_model)."""
    gain, bias = norm_affine(norm_module(runner, hook_name))
    return (normalized.astype(np.float64) * gain + bias).astype(np.float32)


def block_input(runner: Runner, hook: str, value: np.ndarray) -> np.ndarray:
    """What a block reads from a captured hook: for a norm's `hook_normalized`, that norm's output (`norm_output`);
    for any other hook (the residual stream), the value itself."""
    return norm_output(runner, hook, value) if hook.endswith(".hook_normalized") else value
