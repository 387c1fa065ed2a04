"""The models a person can pick, by id, and loading them."""

from __future__ import annotations

import torch

from model.runner import Runner
from model.toy import available_toys, load_toy
from model.toy_runner import ToyRunner

TOY_PREFIX = "toy-"


def list_model_ids() -> list[str]:
    """Every model id that can be loaded here, toy models first (e.g. 'toy-reverse')."""
    return [TOY_PREFIX + name for name in available_toys()]


def load_runner(model_id: str, device: str | torch.device = "cpu") -> Runner:
    """Load a model by id; ValueError naming the known ids if there is no such model."""
    if model_id.startswith(TOY_PREFIX) and model_id[len(TOY_PREFIX):] in available_toys():
        return ToyRunner(model_id, load_toy(model_id[len(TOY_PREFIX):], device=device))
    raise ValueError(f"unknown model {model_id!r}; known models: {', '.join(list_model_ids())}")
