"""A norm's output from its `hook_normalized`: as in TransformerLens, that hook is the norm's input (centred, for
LayerNorm) divided by its `hook_scale`, before the norm's weight and bias; what the next block reads is
hook_normalized x weight + bias. The weights are read from the loaded model of any family (never changed)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from model.core.runner import Runner


def norm_module(runner: Runner, hook_name: str) -> nn.Module:
    """The norm whose `hook_normalized` is `hook_name` ("decoder.3.ln1.hook_normalized")."""
    model = getattr(runner, "model", None)
    if model is not None:  # a Hugging Face model: the tap is on the norm module itself (model/hf/taps.py)
        return runner.taps[hook_name].module  # type: ignore[attr-defined]
    point = runner.toy.model.hook_points[hook_name]  # type: ignore[attr-defined]  # a from-scratch model
    return next(module for module in runner.toy.model.modules()  # type: ignore[attr-defined]
                if getattr(module, "hook_normalized", None) is point)


def norm_output(runner: Runner, hook_name: str, normalized: np.ndarray) -> np.ndarray:
    """(pos, d_model) float32: the norm's output for its `normalized` values (pos, d_model)."""
    module = norm_module(runner, hook_name)
    with torch.no_grad():
        weight = module.weight.detach().float().cpu().numpy()  # (d_model,)
        bias = getattr(module, "bias", None)
        out = normalized.astype(np.float32) * weight
        return out if bias is None else out + bias.detach().float().cpu().numpy()


def block_input(runner: Runner, hook: str, value: np.ndarray) -> np.ndarray:
    """What a block reads from a captured hook: for a norm's `hook_normalized`, that norm's output (`norm_output`);
    for any other hook (the residual stream), the value itself."""
    return norm_output(runner, hook, value) if hook.endswith(".hook_normalized") else value
