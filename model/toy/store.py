"""The shipped toy models: how their sequences are built, and saving/loading them as safetensors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.tokenizer import CharTokenizer
from attention_atlas.model.scratch.transformer import DecoderOnly, EncoderDecoder, build_model
from attention_atlas.model.toy.tasks import TASKS, Task

TOY_DIR = Path(__file__).parent / "models"
WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"
MAX_CHARS = 256  # characters in a toy vocabulary
SIZE_CAPS = {  # field -> (what a person calls it, least, most): a toy model this app trains or opens
    "n_encoder_layers": ("encoder layers", 0, 8),
    "n_decoder_layers": ("layers", 1, 8),
    "n_heads": ("heads", 1, 16),
    "d_model": ("d_model", 8, 512),
    "d_ff": ("d_ff", 8, 2048),
    "max_len": ("longest sequence", 8, 512),
    "vocab_size": ("vocabulary", 4, MAX_CHARS + 3),
}


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
        """Encoder-decoder: chars + </s>. Decoder-only: <s> + chars + separator, if the task has one (the prompt)."""
        ids = self.tokenizer.encode(self.source_text(text), self.max_source_chars, allowed=self.source_chars)
        if self.task.kind == "encoder-decoder":
            return [*ids, self.tokenizer.eos_id]
        separator = self.tokenizer.encode(self.task.separator, 1) if self.task.separator else []
        return [self.tokenizer.bos_id, *ids, *separator]

    def encode_target(self, text: str) -> list[int]:
        """Target chars + </s> (the tokens the model should produce)."""
        return [*self.tokenizer.encode(text, self.model.cfg.max_len - 1, what="target"), self.tokenizer.eos_id]


def toy_dir(task_name: str, root: Path = TOY_DIR) -> Path:
    return root / task_name


def save_toy(toy: ToyModel, folder: Path) -> Path:
    """Write weights (safetensors), config, vocabulary and training record into `folder` (made if needed)."""
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


def is_toy_folder(folder: Path) -> bool:
    """Whether `folder` holds a toy model (its config names a task; a Hugging Face config does not)."""
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "task" in meta and "chars" in meta


def load_toy(task_name: str, root: Path = TOY_DIR, device: str | torch.device = "cpu") -> ToyModel:
    """Load a trained toy model, in eval mode, its weights frozen, from root/<task>/."""
    folder = toy_dir(task_name, root)
    if not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"no trained model for task {task_name!r} in {folder}; train it with "
                                f"`attention-atlas train --task {task_name}`")
    return load_toy_folder(folder, device)


def load_toy_folder(folder: Path, device: str | torch.device = "cpu") -> ToyModel:
    """Load a toy model folder (as `save_toy` writes it), in eval mode, its weights frozen (requires_grad False).
    ValueError naming what is wrong with a folder that is not one: a config that does not parse or names no known
    task, sizes over the caps, weights whose names or shapes differ from the config's model."""
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{CONFIG_FILE} cannot be read as JSON ({error})") from error
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), dict):
        raise UserError(f"{CONFIG_FILE} has no model settings: it is not a toy model's")
    if meta.get("task") not in TASKS:
        raise UserError(f"{CONFIG_FILE} names the task {meta.get('task')!r}; known tasks: {', '.join(TASKS)}")
    chars = meta.get("chars")
    if (not isinstance(chars, list) or not 0 < len(chars) <= MAX_CHARS or len(set(chars)) < len(chars)
            or not all(isinstance(c, str) and len(c) == 1 for c in chars)):
        raise UserError(f"{CONFIG_FILE} has no vocabulary (a list of at most {MAX_CHARS} distinct characters)")
    tokenizer = CharTokenizer(chars)
    try:
        cfg = TransformerConfig.from_dict(meta["model"])
    except (TypeError, ValueError) as error:
        raise UserError(f"{CONFIG_FILE}'s model settings are not valid: {error}") from error
    if cfg.vocab_size != len(tokenizer):
        raise UserError(f"the model has {cfg.vocab_size} tokens but its vocabulary {len(tokenizer)}")
    problems = size_problems(cfg)
    if problems:
        raise UserError("the model is larger than this app opens: " + "; ".join(problems))
    if not (folder / WEIGHTS_FILE).is_file():
        raise UserError(f"{WEIGHTS_FILE} is missing")
    model = build_model(cfg)
    try:
        load_model(model, str(folder / WEIGHTS_FILE), device=str(device))
    except Exception as error:  # safetensors' own errors for a bad header, missing or unexpected tensors
        raise UserError(f"{WEIGHTS_FILE} does not hold this model's weights ({error})") from error
    model.to(device).eval().requires_grad_(False)  # shared, never trained here: a gradient pass (patching's
    # attribution) builds its graph from the activations it asks about, not through every weight
    training = meta.get("training")
    return ToyModel(TASKS[meta["task"]], tokenizer, model, training if isinstance(training, dict) else {})


def size_problems(cfg: TransformerConfig) -> list[str]:
    """What in `cfg` is zero, negative or over SIZE_CAPS, as a person reads it ([] when every size is fine)."""
    problems = []
    for name, (label, low, high) in SIZE_CAPS.items():
        value = getattr(cfg, name)
        if not isinstance(value, int) or not low <= value <= high:
            problems.append(f"{label} must be a whole number from {low} to {high:,}, not {value!r}")
    return problems


def available_toys(root: Path = TOY_DIR) -> list[str]:
    """Task names with a trained model on disk, in the order of TASKS."""
    return [name for name in TASKS if (toy_dir(name, root) / WEIGHTS_FILE).is_file()]
