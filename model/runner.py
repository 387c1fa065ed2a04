"""What every model in the app offers: run text through it and get a Trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from model.tracing import ModelFacts, Trace

CausalMode = Literal["auto", "on", "off"]


@dataclass(frozen=True)
class RunOptions:
    """How to run and what to capture."""

    hooks: tuple[str, ...] = ("*",)  # glob patterns of hook names to capture ("*" = all)
    causal: CausalMode = "auto"  # auto: as trained (decoder causal, encoder not); on: every self-attention
    #                              causal (the encoder too); off: no causal mask anywhere (a what-if)
    pad_to: int = 0  # append <pad> tokens to the source up to this many tokens, to show the padding mask
    blocked: tuple[tuple[int, int], ...] = ()  # (query, key) pairs hidden in the first self-attention
    #                                           (the encoder's, or a decoder-only model's)

    def padded(self, ids: list[int], pad_id: int, limit: int) -> list[int]:
        """`ids` followed by `pad_id` up to pad_to tokens (never beyond `limit`)."""
        return ids + [pad_id] * max(0, min(self.pad_to, limit) - len(ids))

    def record(self) -> dict[str, Any]:
        """The mask choices as plain JSON-able values, as a Trace keeps them."""
        return {"causal": self.causal, "pad_to": self.pad_to, "blocked": [list(pair) for pair in self.blocked]}


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
