"""GPT-2: hooks found by discovery; its attention keeps one Conv1D `c_attn` whose weight is (d_model, 3 d_model),
already transposed, rows [W_Q | W_K | W_V], and `c_proj`; its scale may also divide by the layer's number."""

from __future__ import annotations

import math
from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine, split_columns


class Gpt2Adapter(Adapter):
    name = "GPT-2"
    model_types: ClassVar[tuple[str, ...]] = ("gpt2",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        whole = affine(attention.c_attn)  # (d_model, 3 d_model)
        width = whole[0].shape[0]
        q, k, v = split_columns(whole, (width, width, width))
        scale, text = self.scale(attention, attention.head_dim, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.c_proj)}, attention.num_heads,
                            attention.num_heads, attention.head_dim, scale, text)

    def scale(self, attention: nn.Module, d_head: int, layer: int) -> tuple[float, str]:
        """1/√d_head unless `scale_attn_weights` is off; also 1/(layer + 1) with `scale_attn_by_inverse_layer_idx`."""
        scale, text = (1 / math.sqrt(d_head), f"1/√{d_head}") if attention.scale_attn_weights else (1.0, "1")
        if attention.scale_attn_by_inverse_layer_idx:
            scale, text = scale / (layer + 1), f"{text} × 1/{layer + 1} (GPT-2's scale_attn_by_inverse_layer_idx)"
        return scale, text
