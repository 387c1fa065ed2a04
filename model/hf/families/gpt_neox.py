"""GPT-NeoX (Pythia): hooks found by discovery (a parallel block, partial rotary); its attention keeps one
`query_key_value` projection with each head's query, key and value side by side, and `dense` as W_O."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine


class GptNeoXAdapter(Adapter):
    name = "GPT-NeoX"
    model_types: ClassVar[tuple[str, ...]] = ("gpt_neox",)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        w, b = affine(attention.query_key_value)  # (d_model, heads x 3 x d_head)
        d_head = attention.head_size
        heads = w.shape[1] // (3 * d_head)

        def part(a: np.ndarray | None, i: int) -> np.ndarray | None:
            """Columns (..., heads x 3 x d_head) -> part i (0 q, 1 k, 2 v) of every head, (..., heads x d_head)."""
            return None if a is None else a.reshape(*a.shape[:-1], heads, 3, d_head)[..., i, :].reshape(
                *a.shape[:-1], -1)

        affines = {name: (part(w, i), part(b, i)) for i, name in enumerate("qkv")} | {"o": affine(attention.dense)}
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights(affines, heads, heads, d_head, scale, text)
