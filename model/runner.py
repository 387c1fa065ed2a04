"""What every model in the app offers: run text through it and get a Trace."""

from __future__ import annotations

from typing import Protocol

from model.options import RunOptions
from model.tracing import ModelFacts, Trace

__all__ = ["RunOptions", "Runner"]  # RunOptions lives in model/options.py; callers may import it from here


class Runner(Protocol):
    """A loaded model that turns text into a Trace."""

    facts: ModelFacts
    examples: tuple[str, ...]  # texts to offer a person first

    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        """Trace one forward pass. target=None: generate the output (greedy, under the masks of `options`)
        and trace it; else trace the model reading `target` (teacher forcing). ValueError for unusable text."""
        ...

    def cautions(self, text: str) -> tuple[str, ...]:
        """What a person should know before reading this text's output (e.g. longer than the model learned)."""
        ...
