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


def stack_output(facts: ModelFacts, stack: str, layer_output: str = "hook_resid_post") -> str:
    """The hook of the stream `stack` hands on (pos, d_model): a decoder read block by block (`facts.block_kinds`:
    a hybrid's, Falcon-H1's) after its last block, which may be no attention layer of the app's and offer no
    `layer_output`; else its last layer's `layer_output`."""
    if stack == "decoder" and facts.block_kinds:
        return f"decoder.blocks.{len(facts.block_kinds) - 1}.hook_resid_post"
    last = facts.n_encoder_layers if stack == "encoder" else facts.n_decoder_layers
    return f"{stack}.{last - 1}.{layer_output}"


def prediction_hook(facts: ModelFacts, unembedding: Unembedding) -> str:
    """The hook the model's prediction is read from: its stack's output (`stack_output`)."""
    return stack_output(facts, unembedding.stack, unembedding.layer_output)
