"""Choosing the next token from a model's logits: greedy, or sampling with temperature, top-k and top-p,
from a seeded generator so that the same settings give the same tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_NEW_TOKENS = 64  # the most tokens one generation keeps (each step stores its attention rows)
TOP_ALTERNATIVES = 10


@dataclass(frozen=True)
class DecodeSettings:
    """How the next token is chosen."""

    greedy: bool = True  # always the most likely token (the other fields but max_new are then unused)
    temperature: float = 1.0  # logits / temperature before softmax; <= 0 means greedy
    top_k: int = 0  # keep the k most likely tokens (0: all)
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches p (nucleus), in (0, 1]
    seed: int = 0  # the sampler's seed: step i draws from a generator seeded with (seed, i)
    max_new: int = 16  # tokens to generate at most, 1..MAX_NEW_TOKENS

    def problems(self) -> list[str]:
        """What is wrong with these settings, as a person reads it (empty: usable)."""
        found = []
        if not 1 <= self.max_new <= MAX_NEW_TOKENS:
            found.append(f"Max new tokens must be between 1 and {MAX_NEW_TOKENS}; it is {self.max_new}.")
        if not self.is_greedy:
            if self.top_k < 0:
                found.append(f"Top-k must be at least 1 (or 0 for no limit); it is {self.top_k}.")
            if not 0 < self.top_p <= 1:
                found.append(f"Top-p must be above 0 and at most 1; it is {self.top_p:g}.")
        return found

    @property
    def is_greedy(self) -> bool:
        """Greedy by choice, or because the temperature is not above 0."""
        return self.greedy or self.temperature <= 0

    def describe(self) -> str:
        if self.is_greedy:
            return "greedy"
        parts = [f"temperature {self.temperature:g}", f"top-k {self.top_k or 'all'}", f"top-p {self.top_p:g}"]
        return "sampling: " + ", ".join(parts) + f", seed {self.seed}"


def next_distribution(logits: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """(vocab,) logits -> (vocab,) probabilities the next token is drawn from (greedy: the model's own)."""
    logits = logits.float()
    if settings.is_greedy:
        return logits.softmax(-1)
    logits = logits / settings.temperature
    if 0 < settings.top_k < logits.numel():
        kth = logits.topk(settings.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if settings.top_p < 1:
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above each one
        drop = order[before >= settings.top_p]  # the top token always stays (its `before` is 0)
        probs = probs.index_fill(0, drop, 0.0)
        probs = probs / probs.sum()
    return probs


def choose_next(logits: torch.Tensor, settings: DecodeSettings, step: int) -> int:
    """The next token id for generation step `step` (0-based): argmax, or a draw seeded by (seed, step)."""
    if settings.is_greedy:
        return int(logits.argmax())
    generator = torch.Generator().manual_seed(settings.seed * 100_003 + step)
    return int(torch.multinomial(next_distribution(logits, settings).cpu(), 1, generator=generator))
