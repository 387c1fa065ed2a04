"""GPT-NeoX (Pythia): hooks found by discovery (a parallel block, partial rotary); its attention keeps one
`query_key_value` projection with each head's query, key and value side by side, and `dense` as W_O."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine, interleaved


class GptNeoXAdapter(Adapter):
    name = "GPT-NeoX"
    model_types: ClassVar[tuple[str, ...]] = ("gpt_neox",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        d_head = attention.head_size
        q, k, v = interleaved(affine(attention.query_key_value), d_head)  # from (d_model, heads x 3 x d_head)
        scale, text = self.scale(attention, d_head, layer)
        heads = q[0].shape[1] // d_head
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.dense)}, heads, heads, d_head, scale, text)
