"""What the residual stream is the sum of, for the methods that split it into parts (direct logit attribution, the
contribution graph): the embeddings, the attention heads and the MLPs, where every block is one of the app's layers;
and where the stream's last value, the one the prediction is read from, is recorded."""

from __future__ import annotations

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.inspect.lens import Unembedding


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


def prediction_hook(facts: ModelFacts, unembedding: Unembedding) -> str:
    """The hook the model's prediction is read from: its last layer's output, or a hybrid decoder's last block's
    (`facts.block_kinds`: every block's stream is recorded, and the last block may be no attention layer of the
    app's)."""
    blocks = len(facts.block_kinds) if unembedding.stack == "decoder" else 0
    if blocks:
        return f"decoder.blocks.{blocks - 1}.hook_resid_post"
    return unembedding.hook(facts.n_decoder_layers - 1)
