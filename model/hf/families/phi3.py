"""Phi-3: hooks found by discovery; its attention keeps one `qkv_proj` with rows [every query head; every key/value
head's key; ... value] (grouped-query), and `o_proj`."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine, split_columns


class Phi3Adapter(Adapter):
    name = "Phi-3"
    model_types: ClassVar[tuple[str, ...]] = ("phi3",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        whole = affine(attention.qkv_proj)  # (d_model, (heads + 2 kv_heads) x d_head)
        d_head = attention.head_dim
        q_width = attention.config.num_attention_heads * d_head
        kv_width = (whole[0].shape[1] - q_width) // 2
        q, k, v = split_columns(whole, (q_width, kv_width, kv_width))
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.o_proj)}, q_width // d_head,
                            kv_width // d_head, d_head, scale, text)
