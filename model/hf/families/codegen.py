"""CodeGen: hooks found by discovery (attention and MLP in parallel after one norm, partial rotary); its attention
keeps one `qkv_proj` laid out in the 4 model-parallel shards it was trained with, each shard's columns [q | v | k]
(so no fused layout of discovery's fits, and hook_q/hook_k are not placed), and `out_proj`."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, Affine, LayerWeights, affine


class CodeGenAdapter(Adapter):
    name = "CodeGen"
    model_types: ClassVar[tuple[str, ...]] = ("codegen",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        w, b = affine(attention.qkv_proj)  # (d_model, 3 d_model): per shard, [q | v | k]
        shards, d_head = attention.mp_num, attention.head_dim
        parts = w.reshape(w.shape[0], shards, 3, -1)  # (d_model, shards, q v k, d_model / shards)

        def part(i: int) -> Affine:
            bias = None if b is None else b.reshape(shards, 3, -1)[:, i].reshape(-1)
            return parts[:, :, i].reshape(w.shape[0], -1), bias

        affines = {"q": part(0), "v": part(1), "k": part(2), "o": affine(attention.out_proj)}
        scale, text = self.scale(attention, d_head, layer)
        heads = attention.num_attention_heads
        return LayerWeights(affines, heads, heads, d_head, scale, text)
