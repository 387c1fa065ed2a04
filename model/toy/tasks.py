"""The toy tasks the shipped models are trained on: random examples from a seed, and each task's recipe (the model it
trains and how)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from attention_atlas.model.scratch.config import ModelKind, TransformerConfig
from attention_atlas.model.toy.settings import TrainSettings

LETTERS = string.ascii_lowercase
MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def induction_model(vocab_size: int, kind: ModelKind) -> TransformerConfig:
    """Two attention layers, what an induction head needs (a previous-token head, then a head that matches on its
    output), pre-norm and no dropout: the head forms early."""
    return TransformerConfig(vocab_size, kind=kind, d_model=64, n_heads=4, d_ff=256, n_encoder_layers=0,
                             n_decoder_layers=2, dropout=0.0, max_len=64, norm="pre")


@dataclass(frozen=True)
class Task:
    """A source -> target string task, the model kind trained on it and its recipe (`model`, `settings`)."""

    name: str
    description: str
    kind: ModelKind
    chars: str  # every character that can appear in a source or a target
    max_source_chars: int  # longest source in training
    sample: Callable[[random.Random], tuple[str, str]]
    examples: tuple[str, ...]  # sources to show a person first
    probe: tuple[str, str]  # the (source, target) whose attention the Train page follows over training
    separator: str = ""  # decoder-only: the character between source and target ("" for none)
    source_positions: Callable[[str], list[int]] | None = None  # encoder-decoder: for a source, the source
    # position each target character is read from (copy: 0, 1, 2…), where there is one
    model: Callable[[int, ModelKind], TransformerConfig] = TransformerConfig.toy  # (vocab size, kind) -> its config
    settings: TrainSettings = field(default_factory=TrainSettings)  # how it trains: the Train page's, the command's
    shipped_steps: int | None = None  # most steps of its shipped model's training (`make train`), where not settings'


def _random_letters(rng: random.Random, max_chars: int) -> str:
    """Lowercase letters with occasional single spaces between them, 1..max_chars long."""
    length = rng.randint(1, max_chars)
    chars = [rng.choice(LETTERS)]
    while len(chars) < length:
        space = chars[-1] != " " and rng.random() < 0.15 and len(chars) < length - 1
        chars.append(" " if space else rng.choice(LETTERS))
    return "".join(chars)


def _copy(rng: random.Random) -> tuple[str, str]:
    text = _random_letters(rng, 20)
    return text, text


def _reverse(rng: random.Random) -> tuple[str, str]:
    text = _random_letters(rng, 20)
    return text, text[::-1]


def _distinct_letters(rng: random.Random, low: int, high: int) -> str:
    """low..high lowercase letters, none twice."""
    return "".join(rng.sample(LETTERS, rng.randint(low, high)))


def _induction(rng: random.Random) -> tuple[str, str]:
    """Distinct letters, then the same letters again: only a head that looks back at the token after the
    current token's earlier copy (an induction head) predicts the second half."""
    text = _distinct_letters(rng, 4, 12)
    return text, text


def _sort(rng: random.Random) -> tuple[str, str]:
    text = _random_letters(rng, 12).replace(" ", "") or rng.choice(LETTERS)
    return text, "".join(sorted(text))


def _sorted_positions(text: str) -> list[int]:
    """Where each character of sorted(text) stands in text (equal letters in their order)."""
    return sorted(range(len(text)), key=lambda i: text[i])


def _date(rng: random.Random) -> tuple[str, str]:
    """A date in words ('march 3 2021', '3 mar 2021', 'march 3, 2021') -> ISO 8601 ('2021-03-03')."""
    month = rng.randrange(12)
    day = rng.randint(1, DAYS_IN_MONTH[month])
    year = rng.randint(1900, 2099)
    name = MONTHS[month] if rng.random() < 0.6 else MONTHS[month][:3]
    style = rng.randrange(3)
    source = (f"{name} {day} {year}", f"{day} {name} {year}", f"{name} {day}, {year}")[style]
    return source, f"{year:04d}-{month + 1:02d}-{day:02d}"


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("copy", "copies lowercase text", "encoder-decoder", LETTERS + " ", 20, _copy,
             ("hello world", "attention", "the cat sat"), ("the cat sat", "the cat sat"),
             source_positions=lambda text: list(range(len(text)))),
        Task("reverse", "reverses lowercase text", "encoder-decoder", LETTERS + " ", 20, _reverse,
             ("hello world", "attention", "stressed"), ("attention", "noitnetta"),
             source_positions=lambda text: list(range(len(text)))[::-1]),
        Task("date", "rewrites a date in words as YYYY-MM-DD", "encoder-decoder",
             LETTERS + string.digits + " ,-", 20, _date,
             ("march 3 2021", "14 feb 1999", "december 25, 2024"), ("march 3 2021", "2021-03-03")),
        Task("gpt-date", "a decoder-only model that continues 'date in words=' with YYYY-MM-DD", "decoder",
             LETTERS + string.digits + " ,-=", 20, _date, ("march 3 2021", "14 feb 1999", "december 25, 2024"),
             ("march 3 2021", "2021-03-03"), separator="="),
        Task("induction", "a decoder-only model that repeats distinct letters it has read once", "decoder",
             LETTERS, 12, _induction, ("qwertyuiop", "abcdefgh", "zyxwvu"), ("kfzqbmxrtj", "kfzqbmxrtj"),
             model=induction_model,
             # a constant rate lets the head form within a minute or two on a CPU, the Train page's default
             settings=TrainSettings(steps=3000, peak_lr=1e-3, schedule="constant", label_smoothing=0.0),
             shipped_steps=8000),  # 3,000 steps give 97% exact on held-out examples; the shipped model is held to 99%
        Task("sort", "sorts lowercase letters", "encoder-decoder", LETTERS, 12, _sort,
             ("stressed", "banana", "attention"), ("tensorial", "aeilnorst"), source_positions=_sorted_positions),
    )
}


def make_examples(task: Task, count: int, seed: int) -> list[tuple[str, str]]:
    """`count` (source, target) pairs drawn with their own random generator."""
    rng = random.Random(seed)
    return [task.sample(rng) for _ in range(count)]
