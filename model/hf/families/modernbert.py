"""ModernBERT: an encoder whose hooks are found by discovery (pre-norm, rotary, local and global layers); its
attention keeps one `Wqkv` with rows [every query head; every key head; every value head], and `Wo`."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine, split_columns


class ModernBertAdapter(Adapter):
    name = "ModernBERT"
    model_types: ClassVar[tuple[str, ...]] = ("modernbert",)
    kind = "encoder"

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        whole = affine(attention.Wqkv)  # (d_model, 3 x heads x d_head)
        width = whole[0].shape[1] // 3
        q, k, v = split_columns(whole, (width, width, width))
        d_head = attention.head_dim
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.Wo)}, width // d_head, width // d_head,
                            d_head, scale, text)
