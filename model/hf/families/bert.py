"""BERT and its kind (RoBERTa, XLM-RoBERTa, CamemBERT): a post-norm encoder with learned absolute positions, whose
attention keeps `query`/`key`/`value` Linears and whose W_O is the next module's (`attention.output.dense`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, affine
from attention_atlas.model.hf.taps import (
    LAYER_NORM,
    Family,
    Reader,
    attention_hooks,
    first_input,
    first_output,
    norm_hooks,
    output,
)


def post_norm_encoder(name: str, layer: str, attention: str, attn_out: tuple[str, Reader], ln1: str,
                      mlp_pre: tuple[str, Reader], mlp_post: tuple[str, Reader], mlp_out: str, ln2: str,
                      count: Callable[[Any], int]) -> Family:
    """A BERT-style encoder: learned positions, and each norm reading its sublayer's sum (post-norm), so that the
    sums are read from the norms' inputs. The parts' paths are relative to `layer` ("encoder.layer.{i}", under the
    base model)."""
    return Family(
        name=name,
        kind="encoder",
        positional="learned absolute",
        norm="post-norm",
        stack_taps={"encoder": {
            "hook_embed": ("embeddings.word_embeddings", output),
            "hook_pos_embed": ("embeddings.position_embeddings", output),
        }},
        layer_taps={"encoder": {
            "hook_resid_pre": (layer, first_input),
            **attention_hooks("attn", f"{layer}.{attention}"),
            "hook_attn_out": (f"{layer}.{attn_out[0]}", attn_out[1]),
            "hook_resid_mid": (f"{layer}.{ln1}", first_input),  # the sum, before the norm
            **norm_hooks("ln1", f"{layer}.{ln1}", LAYER_NORM),
            "mlp.hook_pre": (f"{layer}.{mlp_pre[0]}", mlp_pre[1]),
            "mlp.hook_post": (f"{layer}.{mlp_post[0]}", mlp_post[1]),
            "hook_mlp_out": (f"{layer}.{mlp_out}", output),
            "hook_resid_post": (f"{layer}.{ln2}", first_input),
            **norm_hooks("ln2", f"{layer}.{ln2}", LAYER_NORM),
            "hook_normalized_resid_post": (layer, first_output),
        }},
        layer_counts={"encoder": count},
    )


BERT = post_norm_encoder(
    "BERT", "encoder.layer.{i}", "attention.self", ("attention.output.dense", output), "attention.output.LayerNorm",
    ("intermediate.dense", output), ("intermediate", output), "output.dense", "output.LayerNorm",
    lambda c: c.num_hidden_layers)


class BertAdapter(Adapter):
    name = "BERT"
    model_types: ClassVar[tuple[str, ...]] = ("bert", "roberta", "xlm-roberta", "camembert")
    kind = "encoder"

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return BERT

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        """`query`, `key`, `value`; W_O is `attention.output.dense`, the module hook_attn_out reads."""
        affines = {"q": affine(attention.query), "k": affine(attention.key), "v": affine(attention.value),
                   "o": affine(attn_out)}
        heads, d_head = attention.num_attention_heads, attention.attention_head_size
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights(affines, heads, heads, d_head, scale, text)
