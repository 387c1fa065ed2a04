"""Falcon: computes attention in its own code (model/hf/own_attention.py routes it through the app's attention), with
rotary positions; hooks found by discovery. Its one `query_key_value` projection has one of three layouts: the new
decoder architecture's (Falcon-40B, 180B: per key/value head, its group's queries then its key and value), the
multi-query one (Falcon-7B: every query head, then one key and one value head), or each head's query, key and value
side by side. `dense` is W_O. Falcon with ALiBi instead of rotary positions (Falcon-RW) is refused, saying so."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families.adapter import (
    Adapter,
    Affine,
    LayerWeights,
    Sizes,
    affine,
    interleaved,
    split_columns,
)
from attention_atlas.model.hf.heads import attention
from attention_atlas.model.hf.own_attention import route_modules


class FalconAdapter(Adapter):
    name = "Falcon"
    model_types: ClassVar[tuple[str, ...]] = ("falcon",)
    own_attention = True

    def prepare(self, model: nn.Module) -> None:
        if model.config.alibi:
            raise UserError("this Falcon places its tokens with ALiBi (as Falcon-RW does), which the app reads in "
                            "BLOOM but not yet in Falcon; Falcon models with rotary positions open.")
        route_modules(model, "FalconAttention", _attention)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        heads, kv_heads, d_head = attention.num_heads, _kv_heads(attention.config), attention.head_dim
        q, k, v = _qkv(affine(attention.query_key_value), attention.config, heads, kv_heads, d_head)
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.dense)}, heads, kv_heads, d_head, scale,
                            text)

    def sizes(self, config: Any, stack: str) -> Sizes:
        heads, d_model = config.num_attention_heads, config.hidden_size
        return Sizes(heads, _kv_heads(config), d_model, d_model // heads, config.ffn_hidden_size)


def _kv_heads(config: Any) -> int:
    """The key/value heads: the config's in the new decoder architecture or without multi-query, else one."""
    return config.num_kv_heads if config.new_decoder_architecture or not config.multi_query else 1


def _qkv(whole: Affine, config: Any, heads: int, kv_heads: int, d_head: int) -> list[Affine]:
    """The fused projection's q (d_model, heads x d_head), k and v (d_model, kv_heads x d_head), whichever layout."""
    if not config.new_decoder_architecture:
        return split_columns(whole, (heads * d_head, d_head, d_head)) if config.multi_query else \
            interleaved(whole, d_head)
    group = heads // kv_heads

    def part(a: Any, parts: slice) -> Any:  # (..., kv_heads x (group + 2) x d_head) -> (..., its heads x d_head)
        return None if a is None else a.reshape(*a.shape[:-1], kv_heads, group + 2, d_head)[..., parts, :].reshape(
            *a.shape[:-1], -1)

    return [(part(whole[0], parts), part(whole[1], parts)) for parts in (slice(0, group), slice(group, group + 1),
                                                                         slice(group + 1, group + 2))]


def _attention(self: nn.Module, hidden_states: torch.Tensor, alibi: torch.Tensor | None,
               attention_mask: torch.Tensor | None, position_ids: Any = None, layer_past: Any = None,
               use_cache: bool = False, output_attentions: bool = False,
               position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, None]:
    """FalconAttention's forward with rotary positions, softmax(Q K^T / √d_head + M) V by the app's attention; the
    key and value heads kept as few as the model has (its eager code repeats them for every query head first)."""
    from transformers.models.falcon.modeling_falcon import apply_rotary_pos_emb

    fused = self.query_key_value(hidden_states)  # (batch, len, width)
    if self.new_decoder_architecture:
        qkv = fused.unflatten(-1, (self.num_kv_heads, -1, self.head_dim))  # (batch, len, kv_heads, group + 2, d_head)
        query, key, value = qkv[..., :-2, :].flatten(2, 3), qkv[..., -2, :], qkv[..., -1, :]
    else:
        query, key, value = self._split_heads(fused)  # (batch, len, heads or kv_heads, d_head)
    query, key, value = (x.transpose(1, 2) for x in (query, key, value))  # (batch, heads or kv_heads, len, d_head)
    assert position_embeddings is not None  # rotary: transformers passes them (ALiBi Falcons are refused in prepare)
    cos, sin = position_embeddings
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_idx)
    out, _ = attention(self, query, key, value, attention_mask, scaling=self.inv_norm_factor)
    return self.dense(out.flatten(2)), None  # out: (batch, len, heads, d_head)
