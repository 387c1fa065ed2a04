"""What the residual stream is the sum of, for the methods that split it into parts (direct logit attribution, the
contribution graph): the embeddings, the attention heads and the MLPs, where every block is one of the app's layers."""

from __future__ import annotations

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.facts import ModelFacts


def refuse_other_layers(facts: ModelFacts, method: str) -> None:
    """UserError for a hybrid (`facts.attention_blocks`: only some of its blocks are softmax attention): its
    state-space, linear-attention or convolution blocks write to the stream too, and the app records nothing of
    them, so a split into heads and MLPs would leave parts out (however little they write)."""
    if facts.attention_blocks:
        raise UserError(f"{facts.model_id} is a hybrid: its blocks other than softmax attention (the model card's "
                        "layer map) write to the residual stream too, and this app records nothing of them, so "
                        f"{method} cannot split the stream into parts.")


def position_in(position: int, length: int) -> int:
    """`position` of a sequence of `length` tokens as an index from its start (-1: the last); UserError outside it."""
    if not -length <= position < length:
        raise UserError(f"Position {position} is outside the sequence of {length} tokens.")
    return position % length
