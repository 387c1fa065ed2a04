"""OPT: hooks found by discovery (queries scaled when projected: hook_q is the projection's output); its attention
multiplies `q_proj`'s output by 1/√d_head and passes a scale of 1, so W_Q here carries that factor."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights


class OptAdapter(Adapter):
    name = "OPT"
    model_types: ClassVar[tuple[str, ...]] = ("opt",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        generic = super().layer_weights(attention, attn_out, layer)
        w, b = generic.affines["q"]
        factor = attention.scaling
        scaled = (w * factor, None if b is None else b * factor)
        return LayerWeights(generic.affines | {"q": scaled}, generic.n_heads, generic.n_kv_heads, generic.d_head, 1.0,
                            f"1 (the queries were scaled by {factor:.4g} = 1/√{generic.d_head} when projected)")
