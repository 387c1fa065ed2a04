"""DistilBERT: BERT's layout under other names (`q_lin` ... `out_lin`, `sa_layer_norm`, `ffn`), and its MLP's width
called `hidden_dim`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, Sizes, affine, config_int
from attention_atlas.model.hf.families.bert import post_norm_encoder
from attention_atlas.model.hf.taps import Family, first_input, first_output, output

DISTILBERT = post_norm_encoder(
    "DistilBERT", "transformer.layer.{i}", "attention", ("attention", first_output), "sa_layer_norm",
    ("ffn.lin1", output), ("ffn.lin2", first_input), "ffn", "output_layer_norm", lambda c: c.n_layers)


class DistilBertAdapter(Adapter):
    name = "DistilBERT"
    model_types: ClassVar[tuple[str, ...]] = ("distilbert",)
    kind = "encoder"

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return DISTILBERT

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        parts = {"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin"}
        affines = {name: affine(getattr(attention, part)) for name, part in parts.items()}
        heads = attention.n_heads
        d_head = attention.dim // heads
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights(affines, heads, heads, d_head, scale, text)

    def sizes(self, config: Any, stack: str) -> Sizes:
        generic = super().sizes(config, stack)
        return replace(generic, d_ff=config_int(config, "hidden_dim", default=4 * generic.d_model))
