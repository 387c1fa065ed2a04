"""The shipped toy models: how their sequences are built, and saving/loading them as safetensors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from model.scratch.config import TransformerConfig
from model.scratch.tokenizer import CharTokenizer
from model.scratch.transformer import DecoderOnly, EncoderDecoder, build_model
from model.toy.tasks import TASKS, Task

TOY_DIR = Path(__file__).parent / "models"
WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"


@dataclass
class ToyModel:
    """A trained toy model with its task and tokenizer."""

    task: Task
    tokenizer: CharTokenizer
    model: EncoderDecoder | DecoderOnly
    training: dict[str, Any] = field(default_factory=dict)  # how it was trained and how well

    @property
    def source_chars(self) -> str:
        """The characters a person may type (the decoder-only separator is the model's own)."""
        return "".join(c for c in self.tokenizer.chars if c != self.task.separator)

    @property
    def max_source_chars(self) -> int:
        """Longest source whose sequence (and, for decoder-only, its answer) fits the positional table."""
        max_len = self.model.cfg.max_len
        return max_len - 1 if self.task.kind == "encoder-decoder" else (max_len - 3) // 2

    def source_text(self, text: str) -> str:
        """The source a person meant: a decoder-only prompt may end with the separator the model adds itself
        ('14 feb 1999=' is the prompt as the model reads it)."""
        separator = self.task.separator
        return text[: -len(separator)] if separator and text.endswith(separator) else text

    def encode_source(self, text: str) -> list[int]:
        """Encoder-decoder: chars + </s>. Decoder-only: <s> + chars + separator (the prompt)."""
        ids = self.tokenizer.encode(self.source_text(text), self.max_source_chars, allowed=self.source_chars)
        if self.task.kind == "encoder-decoder":
            return [*ids, self.tokenizer.eos_id]
        return [self.tokenizer.bos_id, *ids, *self.tokenizer.encode(self.task.separator, 1)]

    def encode_target(self, text: str) -> list[int]:
        """Target chars + </s> (the tokens the model should produce)."""
        return [*self.tokenizer.encode(text, self.model.cfg.max_len - 1, what="target"), self.tokenizer.eos_id]


def toy_dir(task_name: str, root: Path = TOY_DIR) -> Path:
    return root / task_name


def save_toy(toy: ToyModel, root: Path = TOY_DIR) -> Path:
    """Write weights (safetensors), config, vocabulary and training record to root/<task>/."""
    folder = toy_dir(toy.task.name, root)
    folder.mkdir(parents=True, exist_ok=True)
    save_model(toy.model, str(folder / WEIGHTS_FILE))
    meta = {
        "task": toy.task.name,
        "chars": toy.tokenizer.chars,
        "model": toy.model.cfg.to_dict(),
        "training": toy.training,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load_toy(task_name: str, root: Path = TOY_DIR, device: str | torch.device = "cpu") -> ToyModel:
    """Load a trained toy model, in eval mode, from root/<task>/."""
    folder = toy_dir(task_name, root)
    if not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"no trained model for task {task_name!r} in {folder}; train it with "
                                f"`python -m model.toy.train --task {task_name}`")
    meta = json.loads((folder / CONFIG_FILE).read_text())
    cfg = TransformerConfig.from_dict(meta["model"])
    model = build_model(cfg)
    load_model(model, str(folder / WEIGHTS_FILE), device=str(device))
    model.to(device).eval()
    return ToyModel(TASKS[meta["task"]], CharTokenizer(meta["chars"]), model, meta.get("training", {}))


def available_toys(root: Path = TOY_DIR) -> list[str]:
    """Task names with a trained model on disk, in the order of TASKS."""
    return [name for name in TASKS if (toy_dir(name, root) / WEIGHTS_FILE).is_file()]
