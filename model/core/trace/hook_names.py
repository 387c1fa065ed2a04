"""The hook vocabulary: every name a model of this project may offer, its shape and its meaning.

Names follow TransformerLens (HookedTransformer, HookedEncoder) with a stack prefix: `encoder.` or
`decoder.`, then the layer index for per-layer hooks (`decoder.3.attn.hook_pattern`). A name means
what it means there. In particular the residual hooks are the stream's sums before any norm, also in
post-norm models (the paper's model, BERT, BART, Marian), whose layer output, the normalised stream, is
`hook_normalized_resid_post`. A norm's `hook_normalized` is its input (centred, for LayerNorm) divided by its
`hook_scale`, before its weight and bias: the norm's output is hook_normalized x weight + bias.

A hybrid (model/hf/discovery: softmax attention in some blocks only) numbers its layers by its attention blocks
alone; its residual stream at every block, attention or not, is `decoder.blocks.{b}.hook_resid_pre` and
`hook_resid_post`, b the block's own number (PER_BLOCK).

Shapes are as a Trace stores them: the batch dimension removed. pos = a position of the stack's own
sequence; key_pos = a position of the sequence attended to (the source, for cross-attention).
"""

from __future__ import annotations

import re

_ATTENTION = {  # under `attn.` (self-attention) or `cross_attn.` (the decoder's attention to the encoder)
    "hook_q": "(heads, pos, d_head): each head's queries",
    "hook_k": "(kv_heads, key_pos, d_head): each key/value head's keys",
    "hook_v": "(kv_heads, key_pos, d_head): each key/value head's values",
    "hook_rot_q": "(heads, pos, d_head): queries after the rotary embedding (rotary models)",
    "hook_rot_k": "(kv_heads, key_pos, d_head): keys after the rotary embedding (rotary models)",
    "hook_attn_scores": "(heads, pos, key_pos): Q K^T x the model's scale (1/sqrt(d_head); T5: 1), soft-capped where "
                        "the model caps it (Gemma 2), + any position bias (T5, ALiBi, DeBERTa's position terms), "
                        "before the mask",
    "hook_pattern": "(heads, pos, key_pos): the attention probabilities, softmax over keys after the mask",
    "hook_z": "(heads, pos, d_head): each head's output, pattern x V, before W_O",
}
_NORM = {
    "hook_scale": "(pos, 1): what the norm divides by (the standard deviation, or the RMS)",
    "hook_normalized": "(pos, d_model): the norm's input (centred, for LayerNorm) divided by hook_scale, before its "
                       "weight and bias",
}
PER_LAYER: dict[str, str] = {
    "hook_resid_pre": "(pos, d_model): the residual stream going into the layer",
    **{f"attn.{name}": meaning for name, meaning in _ATTENTION.items()},
    "hook_attn_out": "(pos, d_model): what self-attention adds to the residual stream (after W_O)",
    "hook_resid_mid": "(pos, d_model): the residual stream after self-attention's sum, before any norm",
    **{f"cross_attn.{name}": meaning for name, meaning in _ATTENTION.items()},
    "hook_cross_attn_out": "(pos, d_model): what cross-attention adds to the residual stream",
    "hook_resid_mid_cross": "(pos, d_model): the residual stream after cross-attention's sum, before any norm",
    **{f"ln1.{name}": meaning for name, meaning in _NORM.items()},  # the norm at self-attention
    **{f"ln_cross.{name}": meaning for name, meaning in _NORM.items()},  # the norm at cross-attention
    **{f"ln2.{name}": meaning for name, meaning in _NORM.items()},  # the norm at the MLP
    "hook_mlp_in": "(pos, d_model): the pre-norm toys: what the MLP's norm reads, hook_resid_mid's value, where an "
                   "edit changes the MLP's input alone and not the stream (TransformerLens's, with use_hook_mlp_in)",
    "mlp.hook_pre": "(pos, d_ff): the MLP's hidden layer before the activation (gated MLPs: the gate projection)",
    "mlp.hook_pre_linear": "(pos, d_ff): gated MLPs: the up projection, which the activated gate multiplies",
    "mlp.hook_post": "(pos, d_ff): the MLP's hidden layer after the activation (x the gate, in gated MLPs)",
    "mlp.hook_expert_weights": "(pos, experts): mixtures of experts: the router's scores over every expert (its "
                               "softmax, or its sigmoid where it takes one), before it keeps the top k (as "
                               "TransformerLens records a softmax router's)",
    "mlp.hook_expert_indices": "(pos, k): mixtures of experts: the experts the router sends each token to, the most "
                               "likely first",
    "hook_mlp_out": "(pos, d_model): what the MLP adds to the residual stream",
    "hook_resid_post": "(pos, d_model): the residual stream after the MLP's sum, before any norm",
    "hook_normalized_resid_post": "(pos, d_model): post-norm models: the layer's output, the normalised stream",
}
PER_STACK: dict[str, str] = {
    "hook_embed": "(pos, d_model): the token embeddings (x sqrt(d_model) where the model scales them)",
    "hook_pos_embed": "(pos, d_model): the positional part added to them (absolute positions only)",
    **{f"ln_final.{name}": meaning for name, meaning in _NORM.items()},
    "hook_resid_final": "(pos, d_model): the stack's output, after its final norm where it has one",
}
PER_BLOCK: dict[str, str] = {  # a hybrid's every block (`decoder.blocks.{b}.`), numbered as the model numbers them
    "hook_resid_pre": "(pos, d_model): the residual stream going into the block, whatever mixes its tokens (softmax "
                      "attention, a state space, linear attention, a convolution)",
    "hook_resid_post": "(pos, d_model): the residual stream the block hands on, before any norm",
}
_BLOCK_NAME = re.compile(r"^decoder\.blocks\.\d+\.(.+)$")
_LAYER_NAME = re.compile(r"^(encoder|decoder)\.\d+\.(.+)$")
_STACK_NAME = re.compile(r"^(encoder|decoder)\.(.+)$")


def meaning(name: str) -> str:
    """Shape and meaning of a full hook name ('decoder.3.attn.hook_pattern'); KeyError outside the vocabulary."""
    per_block = _BLOCK_NAME.match(name)
    if per_block:
        return PER_BLOCK[per_block.group(1)]
    per_layer = _LAYER_NAME.match(name)
    if per_layer:
        return PER_LAYER[per_layer.group(2)]
    per_stack = _STACK_NAME.match(name)
    if per_stack:
        return PER_STACK[per_stack.group(2)]
    raise KeyError(name)


def in_vocabulary(name: str) -> bool:
    try:
        meaning(name)
    except KeyError:
        return False
    return True
