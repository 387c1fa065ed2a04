"""Random draws from a training's own generator instead of torch's global one, so that a seed gives the same model
whatever other threads (other sessions' trainings, sampling) draw meanwhile, and no other thread's draws change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

DRAWS = {torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.bernoulli_}  # what layers' initialisers call


class OwnGenerator(TorchFunctionMode):
    """While entered (in the entering thread only: torch's function modes are per thread), parameter initialisation
    and dropout draw from `generator`: the numbers torch's global generator would give after `torch.manual_seed` of
    the same seed, on the CPU. Random functions given no generator get this one; dropout draws its mask here the way
    ATen's CPU dropout draws it (it takes no generator)."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.dropout:
            return self._dropout(*args, **kwargs)
        if kwargs.get("generator") is None and (func in DRAWS or "generator" in kwargs):
            kwargs["generator"] = self.generator  # nn.init's functions pass generator=None on
        return func(*args, **kwargs)

    def _dropout(self, x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        if not training or not 0 < p < 1:  # nothing to draw: torch's own (which refuses p outside [0, 1])
            return F.dropout(x, p, training, inplace)
        noise = torch.empty_like(x).bernoulli_(1 - p, generator=self.generator).div_(1 - p)
        return x.mul_(noise) if inplace else x * noise

