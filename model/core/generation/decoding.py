"""Generation one token at a time, keeping for each new token what a person inspects: its probability, the
alternatives, and the attention row of the query that chose it (every layer and head, over the whole context).

A model kind supplies a `Forward`: the decoder context's ids -> the last position's logits and the captured
attention patterns of that pass. `generate` drives it with any chooser (greedy, seeded sampling)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.capture.record import Captured
from attention_atlas.model.core.generation.sampling import TOP_ALTERNATIVES

Forward = Callable[[list[int]], tuple[torch.Tensor, Mapping[str, Captured]]]  # ids -> (vocab,), patterns
Chooser = Callable[[torch.Tensor, int], int]  # (logits (vocab,), step index) -> token id
CROSS = ".cross_attn."


@dataclass(frozen=True)
class Step:
    """One generated token and what the model did to choose it."""

    token_id: int
    probability: float  # the model's probability of this token (softmax of its logits, no temperature)
    top_ids: np.ndarray  # (TOP_ALTERNATIVES,) the most likely tokens at this step
    top_probs: np.ndarray  # (TOP_ALTERNATIVES,)
    self_rows: np.ndarray  # (layers, heads, context) the choosing query's self-attention
    cross_rows: np.ndarray | None = None  # (layers, heads, source) its cross-attention (encoder-decoders)


@dataclass
class Stepper:
    """What generating from one prompt needs: the decoder's starting context, the source (encoder-decoders),
    the tokens that end a generation, the longest context, the model pass, and the tokenizer's two readings.
    Closes over the shared model: make one per generation call, never keep it in a session."""

    context: list[int]  # the decoder's ids before the first generated token (a causal LM: the prompt)
    forward: Forward
    eos_ids: set[int]
    max_context: int
    tokens: Callable[[list[int]], list[str]]  # ids -> token strings a person reads
    decode: Callable[[list[int]], str]  # generated ids -> their text (special tokens left out)
    source: list[int] = field(default_factory=list)  # what the encoder reads (empty: a causal LM)
    ahead: Callable[[int], None] | None = None  # told the most passes a `generate` call asks for next (a model on
    # NDIF brings them in one request: model/ndif/stepper.py)


def last_row(pattern: Captured) -> np.ndarray:
    """(heads, k): the last query's row of a captured pattern (1, heads, q, k), computed alone from a source."""
    if isinstance(pattern, PatternSource):
        return pattern[0].pattern(rows=[-1], dtype=np.float32)[:, 0]
    return pattern[0, :, -1]


def attention_rows(patterns: Mapping[str, Captured], context: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Captured patterns {hook name: (1, heads, q, k)} in layer order, of a query that reads `context` tokens ->
    the last query's rows, stacked: self (layers, heads, context) and cross (layers, heads, source) or None."""
    self_rows = _aligned([last_row(p) for name, p in patterns.items() if CROSS not in name], context)
    cross_rows = [last_row(p) for name, p in patterns.items() if CROSS in name]
    return self_rows, np.stack(cross_rows).astype(np.float32) if cross_rows else None


def _aligned(rows: list[np.ndarray], context: int) -> np.ndarray:
    """Self-attention rows (heads, k) stacked (layers, heads, context): a sliding-window layer's cache keeps only its
    last keys, so a shorter row is of the last positions, and the keys before them get probability 0."""
    return np.stack([np.pad(row, ((0, 0), (context - row.shape[-1], 0))) for row in rows]).astype(np.float32)


def make_step(logits: torch.Tensor, patterns: Mapping[str, Captured], token_id: int, context: int) -> Step:
    """The Step that chose `token_id` from `logits` (vocab,) with these attention patterns, its query reading
    `context` tokens."""
    probs = logits.float().softmax(-1)  # (vocab,)
    top = probs.topk(min(TOP_ALTERNATIVES, probs.numel()))
    self_rows, cross_rows = attention_rows(patterns, context)
    return Step(token_id, float(probs[token_id]), top.indices.cpu().numpy(), top.values.cpu().numpy(),
                self_rows, cross_rows)


def generate(stepper: Stepper, generated: list[int], n: int, choose: Chooser) -> Iterator[Step]:
    """Up to `n` more tokens after `generated`, one Step each; stops after an end token or at the longest context."""
    ids = [*stepper.context, *generated]
    if stepper.ahead is not None:
        stepper.ahead(n)
    for _ in range(n):
        if len(ids) >= stepper.max_context or (len(ids) > len(stepper.context) and ids[-1] in stepper.eos_ids):
            return
        logits, patterns = stepper.forward(ids)
        token_id = choose(logits, len(ids) - len(stepper.context))
        yield make_step(logits, patterns, token_id, len(ids))
        ids.append(token_id)
