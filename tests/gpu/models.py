"""What the GPU tests run: the shipped toy models and a tiny random Hugging Face model of every family and type
(tests/tiny_hf.py), on the texts here, each loaded once a session on each device and in each precision."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import attention_atlas as aa
from attention_atlas.model.core.devices import PRECISIONS
from attention_atlas.model.core.generation.decoding import Chooser, Step, generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.hf.runner import CONTINUATION_TOKENS
from attention_atlas.model.registry import load_runner
from attention_atlas.model.toy.store import available_toys
from tests.tiny_hf import FAMILIES, TYPES

DEVICE = "cuda"  # where the runs are held to the CPU's
TEXT, TARGET = "the quick brown fox jumps over the lazy dog", "the cat sat on the mat"
TINY = (*FAMILIES, *TYPES)  # 29 tiny random models: every family the app knows, every further model type it opens
TOYS = tuple(f"toy-{task}" for task in available_toys())
PRECISION_NAMES = ("float32", "bfloat16")


class Loaded:
    """Runners loaded once a session, by model (a toy id, or a name of TINY), device and precision."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self._folders = folders
        self._runners: dict[tuple[str, str, str], Runner] = {}

    def __call__(self, model: str, device: str = "cpu", precision: str = "float32") -> Runner:
        """The runner. A further model type (TYPES) that does not open on the CPU either, as GPT-J with transformers
        5.17 ("computes attention in its own code"), skips the test that asked, saying so: which types open with which
        transformers is tests/model's to hold, not this layer's."""
        key = (model, device, precision)
        if key not in self._runners:
            source = str(self._folders[model]) if model in self._folders else model
            try:
                self._runners[key] = load_runner(source, device=device, precision=PRECISIONS[precision])
            except ValueError as error:
                if device != "cpu" or model not in TYPES:
                    raise
                pytest.skip(f"{model} does not open with transformers {transformers.__version__} here: {error}")
        return self._runners[key]


def target_for(model: Runner | aa.Model) -> str | None:
    """An encoder-decoder reads TARGET (teacher forcing: no generation of 64 tokens from a random model); the others
    read TEXT alone, as the app runs them."""
    return TARGET if model.facts.kind == "encoder-decoder" else None


def greedy(logits: torch.Tensor, step: int) -> int:
    return int(logits.argmax())


def steps_of(runner: Runner, n: int = CONTINUATION_TOKENS, choose: Chooser = greedy, text: str = TEXT) -> list[Step]:
    """`n` generated steps from `text` (fewer where an end token comes), each token chosen by `choose`."""
    return list(generate(runner.stepper(text, RunOptions()), [], n, choose))


def following(steps: list[Step]) -> Chooser:
    """A chooser that takes `steps`' tokens in turn: another device's generation made to read the same contexts."""
    return lambda logits, step: steps[step].token_id
