"""DeBERTa-v2 and v3: a BERT-style post-norm encoder with disentangled attention, computed in its own code (routed
through the app's attention, model/hf/own_attention.py). Its scores add, to the content-to-content term Q K^T, a
content-to-position term (each query against the embedding of its distance to the key, `c2p`) and a
position-to-content term (each key against the embedding of the query's distance to it, `p2c`), all divided by
√(d_head x the number of terms). The two position terms reach the app's attention as one bias per layer, (heads,
q_len, k_len), computed by the model's own code from its relative position embeddings (in log buckets beyond a
distance, in v3). v3 adds no absolute positions to its embeddings; v2 may (`position_biased_input`)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import additive_mask
from attention_atlas.model.hf.families.adapter import Adapter, LayerWeights, RelativePositions, affine
from attention_atlas.model.hf.families.bert import post_norm_encoder
from attention_atlas.model.hf.heads import attention
from attention_atlas.model.hf.own_attention import route, route_modules
from attention_atlas.model.hf.placement import computing_device, exclusive, weights_at_hand
from attention_atlas.model.hf.taps import Family, output

LAYER = "encoder.layer.{i}"
DEBERTA = replace(post_norm_encoder(
    "DeBERTa-v2", LAYER, "attention.self", ("attention.output.dense", output), "attention.output.LayerNorm",
    ("intermediate.dense", output), ("intermediate", output), "output.dense", "output.LayerNorm",
    lambda c: c.num_hidden_layers), position_bias=True, bias_per_layer=True)


class DebertaV2Adapter(Adapter):
    name = "DeBERTa-v2"
    model_types: ClassVar[tuple[str, ...]] = ("deberta-v2",)
    kind = "encoder"
    own_attention = True
    adds_score_terms = True

    def prepare(self, model: nn.Module) -> None:
        if getattr(model.config, "conv_kernel_size", 0) > 0:
            raise UserError("this DeBERTa-v2 mixes neighbouring tokens with a convolution after its first layer (as "
                            "its xlarge and xxlarge sizes do), which the app cannot read yet; DeBERTa-v3 and the v2 "
                            "models without it open.")
        route_modules(model, "DisentangledSelfAttention", _attention)
        base = model.base_model
        route(base.embeddings, _embeddings)
        route(base.encoder, _additive_attention_mask, "get_attention_mask")

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        terms = [t for t in ("c2p", "p2c") if t in (config.pos_att_type or ())]
        positions = f"disentangled relative positions ({' + '.join(terms)})"
        if config.position_biased_input:  # v2: learned absolute positions added to the embeddings as well
            return replace(DEBERTA, positional=f"learned absolute and {positions}")
        stack = {k: v for k, v in DEBERTA.stack_taps["encoder"].items() if k != "hook_pos_embed"}
        return replace(DEBERTA, positional=positions, stack_taps={"encoder": stack})

    def relative_positions(self, model: nn.Module, stack: str, length: int) -> RelativePositions | None:
        """Which row of the relative position embeddings each distance key - query reads, for `length` positions."""
        from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

        attention = next(m for m in model.modules() if type(m).__name__ == "DisentangledSelfAttention")
        if not attention.relative_attention:
            return None
        relative = -torch.arange(-(length - 1), length)  # query - key, as DeBERTa counts, for key - query ascending
        buckets = attention.position_buckets
        if buckets > 0:
            relative = make_log_bucket_position(relative, buckets, attention.max_relative_positions)
        span = attention.pos_ebd_size
        rows = torch.clamp(relative + span, 0, 2 * span - 1).long().numpy()  # as its content-to-position term reads
        normalised = ", normalised" if "layer_norm" in model.config.norm_rel_ebd else ""
        table = " beyond a learned table" if model.config.position_biased_input else ""
        exact = f"exact up to {buckets // 2} tokens and logarithmic beyond, so far keys share rows" if buckets > 0 \
            else f"clipped at {span} tokens"
        said = {"c2p": ("the query against the distance's key-side projection (content → position, c2p)",
                        r"q_i\cdot k^{r}_{\delta(i,j)}"),
                "p2c": ("the key against its query-side projection (position → content, p2c)",
                        r"k_j\cdot q^{r}_{\delta(j,i)}")}
        terms = [said[t] for t in ("c2p", "p2c") if t in attention.pos_att_type]
        return RelativePositions(
            f"encoder.rel_embeddings ({2 * span} rows{normalised})",
            f"Nothing is added to the embeddings{table}. Every layer adds to each score {len(terms)} term"
            f"{'s' if len(terms) > 1 else ''} of the query and key with an embedding of their distance: "
            f"{' and '.join(words for words, _ in terms)}, all divided by √({_terms(attention)} d_head). The distance "
            f"is {exact}.",
            r"\mathrm{score}_{ij}=\frac{q_i\cdot k_j" + "".join(f"+{latex}" for _, latex in terms) +
            rf"}}{{\sqrt{{{_terms(attention)}\,d_k}}}}", buckets=rows)

    def score_terms(self, model: nn.Module, layer: int, query: np.ndarray, key: np.ndarray) -> dict[str, np.ndarray]:
        """Its content-to-position ("c2p") and position-to-content ("p2c") terms apart, each computed by the layer's
        own code (a shallow copy of the module that keeps one term: the model itself is never changed)."""
        attention = model.base_model.encoder.layer[layer].attention.self
        if not attention.relative_attention:
            return {}
        encoder = model.base_model.encoder
        device, terms = computing_device(attention), {}
        with torch.inference_mode(), exclusive(attention), weights_at_hand(encoder.rel_embeddings):
            relative = encoder.get_rel_embedding().to(device)  # (2 buckets, d_model), normalised where the model does
            q, k = (torch.from_numpy(np.asarray(x, np.float32)).to(device, relative.dtype)
                    for x in (query, key))  # (heads, len, d_head): the batch of one text's heads
            for kind in attention.pos_att_type:
                one = copy.copy(attention)
                one.pos_att_type = [kind]
                terms[kind] = one.disentangled_attention_bias(q, k, None, relative, _terms(attention)).float().cpu() \
                    .numpy()  # (heads, q_len, k_len)
        return terms

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        """`query_proj`, `key_proj`, `value_proj`; W_O is `attention.output.dense`; the scale 1/√(d_head x terms)."""
        affines = {"q": affine(attention.query_proj), "k": affine(attention.key_proj),
                   "v": affine(attention.value_proj), "o": affine(attn_out)}
        heads, d_head = attention.num_attention_heads, attention.attention_head_size
        terms = _terms(attention)
        return LayerWeights(affines, heads, heads, d_head, 1 / math.sqrt(d_head * terms),
                            f"1/√({d_head} × {terms}) (DeBERTa divides by √d_head for each of its {terms} terms)")


def _terms(attention: nn.Module) -> int:
    """How many terms the scores add: content-to-content, and c2p and p2c where the model has them."""
    return 1 + sum(kind in attention.pos_att_type for kind in ("c2p", "p2c"))


def _attention(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor,
               output_attentions: bool = False, query_states: torch.Tensor | None = None,
               relative_pos: torch.Tensor | None = None,
               rel_embeddings: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """DisentangledSelfAttention's forward: softmax(Q K^T / √(d_head x terms) + c2p + p2c + M) V by the app's
    attention, the position terms from the module's own `disentangled_attention_bias`."""
    batch, heads = hidden_states.size(0), self.num_attention_heads
    query_states = hidden_states if query_states is None else query_states
    query, key, value = (self.transpose_for_scores(projection(x), heads) for projection, x in (
        (self.query_proj, query_states), (self.key_proj, hidden_states), (self.value_proj, hidden_states)))
    terms = _terms(self)  # query, key, value: (batch x heads, len, d_head)
    bias = None
    if self.relative_attention:
        bias = self.disentangled_attention_bias(query, key, relative_pos, self.pos_dropout(rel_embeddings), terms)
        bias = bias.view(batch, heads, *bias.shape[-2:])  # (batch, heads, q_len, k_len)
    query, key, value = (x.view(batch, heads, *x.shape[-2:]) for x in (query, key, value))
    out, _ = attention(self, query, key, value, attention_mask, scaling=1 / math.sqrt(query.size(-1) * terms),
                       position_bias=bias)
    return out.flatten(2), None  # out: (batch, len, heads, d_head)


def _embeddings(self: nn.Module, input_ids: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
    """The embeddings' forward, not multiplied by a 4D mask of the app's (which is no token mask; the app's padding
    is hidden from every real token by that mask instead)."""
    token_mask = None if mask is not None and mask.dim() == 4 else mask
    return type(self).forward(self, input_ids, token_type_ids, position_ids, token_mask, inputs_embeds)


def _additive_attention_mask(self: nn.Module, attention_mask: torch.Tensor) -> torch.Tensor:
    """The encoder's mask as the app's attention reads it, additive (batch, 1, q_len, k_len): the app's own (4D)
    as it is, a token mask (1 = a token, 0 = padding) made into one."""
    if attention_mask.dim() == 4:
        return attention_mask
    allowed = type(self).get_attention_mask(self, attention_mask).bool()  # (batch, 1, len, len)
    return additive_mask(allowed, next(self.parameters()).dtype)
