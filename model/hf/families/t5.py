"""T5 and mT5: pre-norm (RMSNorm) encoder-decoders whose attention adds a learned bias per relative-distance bucket
to unscaled scores (layer 0 of each stack learns it, every layer reuses it); gated MLPs in T5 v1.1 and mT5."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.families.adapter import (
    Adapter,
    LayerWeights,
    RelativePositions,
    Sizes,
    affine,
    config_int,
)
from attention_atlas.model.hf.placement import computing_device, exclusive
from attention_atlas.model.hf.taps import (
    RMS_NORM,
    Family,
    TapTable,
    attention_hooks,
    first_input,
    first_output,
    norm_hooks,
    output,
)

STACKS = ("encoder", "decoder")


def _layer(stack: str, gated: bool) -> TapTable:
    block = f"{stack}.block.{{i}}"
    ffn = f"{block}.layer.{2 if stack == 'decoder' else 1}.DenseReluDense"
    table: TapTable = {
        "hook_resid_pre": (block, first_input),
        **norm_hooks("ln1", f"{block}.layer.0.layer_norm", RMS_NORM),
        **attention_hooks("attn", f"{block}.layer.0.SelfAttention"),
        "hook_attn_out": (f"{block}.layer.0.SelfAttention", first_output),
        "hook_resid_mid": (f"{block}.layer.0", first_output),
    }
    if stack == "decoder":
        table |= {
            **norm_hooks("ln_cross", f"{block}.layer.1.layer_norm", RMS_NORM),
            **attention_hooks("cross_attn", f"{block}.layer.1.EncDecAttention"),
            "hook_cross_attn_out": (f"{block}.layer.1.EncDecAttention", first_output),
            "hook_resid_mid_cross": (f"{block}.layer.1", first_output),
        }
    return table | {
        **norm_hooks("ln2", f"{ffn.rsplit('.', 1)[0]}.layer_norm", RMS_NORM),
        "mlp.hook_pre": (f"{ffn}.act", first_input),  # gated (T5 v1.1, mT5): wi_0's output, the gate
        **({"mlp.hook_pre_linear": (f"{ffn}.wi_1", output)} if gated else {}),
        "mlp.hook_post": (f"{ffn}.wo", first_input),
        "hook_mlp_out": (ffn, output),
        "hook_resid_post": (block, first_output),
    }


def _t5(gated: bool) -> Family:
    return Family(
        name="T5",
        kind="encoder-decoder",
        positional="relative position buckets",
        norm="pre-norm (RMSNorm)",
        stack_taps={stack: {
            "hook_embed": (f"{stack}.embed_tokens", output),
            **norm_hooks("ln_final", f"{stack}.final_layer_norm", RMS_NORM),
            "hook_resid_final": (f"{stack}.final_layer_norm", output),
        } for stack in STACKS},
        layer_taps={stack: _layer(stack, gated) for stack in STACKS},
        layer_counts={"encoder": lambda c: c.num_layers, "decoder": lambda c: c.num_decoder_layers},
        position_bias=True,
        final_norm="decoder.final_layer_norm",
    )


T5, T5_GATED = _t5(gated=False), _t5(gated=True)


class T5Adapter(Adapter):
    name = "T5"
    model_types: ClassVar[tuple[str, ...]] = ("t5", "mt5")
    kind = "encoder-decoder"

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return T5_GATED if config.is_gated_act else T5

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        """`q`, `k`, `v`, `o` without biases, and no scale."""
        affines = {name: affine(getattr(attention, name)) for name in "qkvo"}
        return LayerWeights(affines, attention.n_heads, attention.n_heads, attention.key_value_proj_dim, 1.0,
                            "1 (T5 does not scale: it folds 1/√d_head into its initialisation)")

    def sizes(self, config: Any, stack: str) -> Sizes:
        generic = super().sizes(config, stack)
        return replace(generic, d_head=config.d_kv, d_ff=config_int(config, "d_ff", default=4 * generic.d_model))

    def relative_positions(self, model: nn.Module, stack: str, length: int) -> RelativePositions:
        """Each head's bias per distance key - query = -(len-1) .. len-1, from the stack's layer 0."""
        attention = _first_attention(model, stack)
        relative = torch.arange(-(length - 1), length)  # key - query
        buckets = attention._relative_position_bucket(relative, bidirectional=not attention.is_decoder,
                                                      num_buckets=attention.relative_attention_num_buckets,
                                                      max_distance=attention.relative_attention_max_distance)
        with torch.inference_mode(), exclusive(attention.relative_attention_bias):
            bias = attention.relative_attention_bias(buckets.to(computing_device(attention))).T  # (heads, 2 len - 1)
        return RelativePositions(
            "block 0's relative_attention_bias", "Nothing is added to the embeddings. Each head adds a learned number "
            "to the score of a query–key pair, chosen by their distance (bucketed: exact up close, logarithmic far "
            "away); every layer reuses layer 0's.",
            r"\mathrm{score}_{ij}=q_i\cdot k_j+b_h\big(\mathrm{bucket}(j-i)\big)", bias=bias.float().cpu().numpy())

    def score_bias(self, model: nn.Module, site: str, head: int, q_len: int, k_len: int) -> np.ndarray:
        """The head's relative position bias (none in cross-attention: zeros)."""
        where = Site.of(site)
        if where.is_cross:
            return np.zeros((q_len, k_len), dtype=np.float32)
        first = _first_attention(model, where.stack)
        with torch.no_grad(), exclusive(first.relative_attention_bias):
            bias = first.compute_bias(q_len, k_len, device=computing_device(first.relative_attention_bias))
        return bias[0, head].float().cpu().numpy()  # (1, heads, q_len, k_len) -> (q_len, k_len)


def _first_attention(model: nn.Module, stack: str) -> nn.Module:
    """The self-attention of the stack's layer 0, which holds the stack's relative position table."""
    return getattr(model.base_model, stack).block[0].layer[0].SelfAttention
