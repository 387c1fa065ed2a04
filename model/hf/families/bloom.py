"""BLOOM: computes attention in its own code (model/hf/own_attention.py routes it through the app's attention), with
ALiBi for positions: each head adds slope x (key position - query position) to its scores, its slope one of a
geometric series (1/2, 1/4 ... for 8 heads), so that distant keys are damped, more by some heads than by others. One
`query_key_value` projection holds each head's query, key and value side by side; `dense` is W_O. A pre-norm
decoder whose attention and MLP modules add the residual themselves, so its hooks are a table (discovery would read
those sums as the sublayers' outputs): hook_attn_out is `dense`'s output, hook_mlp_out `dense_4h_to_h`'s. Its
embeddings are normalised before the first block; hook_embed is that norm's output, as TransformerLens reads it."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families.adapter import (
    Adapter,
    LayerWeights,
    RelativePositions,
    Sizes,
    affine,
    alibi_bias,
    alibi_positions,
    interleaved,
)
from attention_atlas.model.hf.heads import attention
from attention_atlas.model.hf.made_once import made_once
from attention_atlas.model.hf.own_attention import route_modules
from attention_atlas.model.hf.taps import (
    LAYER_NORM,
    Family,
    attention_hooks,
    first_input,
    first_output,
    norm_hooks,
    output,
)

BLOCK = "h.{i}"
BLOOM = Family(
    name="BLOOM",
    kind="decoder",
    positional="ALiBi",
    norm="pre-norm (LayerNorm)",
    stack_taps={"decoder": {
        "hook_embed": ("word_embeddings_layernorm", output),
        **norm_hooks("ln_final", "ln_f", LAYER_NORM),
        "hook_resid_final": ("ln_f", output),
    }},
    layer_taps={"decoder": {
        "hook_resid_pre": (BLOCK, first_input),
        **norm_hooks("ln1", f"{BLOCK}.input_layernorm", LAYER_NORM),
        **attention_hooks("attn", f"{BLOCK}.self_attention"),
        "hook_attn_out": (f"{BLOCK}.self_attention.dense", output),
        "hook_resid_mid": (f"{BLOCK}.post_attention_layernorm", first_input),
        **norm_hooks("ln2", f"{BLOCK}.post_attention_layernorm", LAYER_NORM),
        "mlp.hook_pre": (f"{BLOCK}.mlp.dense_h_to_4h", output),
        "mlp.hook_post": (f"{BLOCK}.mlp.dense_4h_to_h", first_input),
        "hook_mlp_out": (f"{BLOCK}.mlp.dense_4h_to_h", output),
        "hook_resid_post": (BLOCK, first_output),
    }},
    layer_counts={"decoder": lambda c: c.n_layer},
    position_bias=True,
    final_norm="ln_f",
)


class BloomAdapter(Adapter):
    name = "BLOOM"
    model_types: ClassVar[tuple[str, ...]] = ("bloom",)
    own_attention = True

    def prepare(self, model: nn.Module) -> None:
        if model.config.apply_residual_connection_post_layernorm:
            raise UserError("this BLOOM adds the normalised stream back (apply_residual_connection_post_layernorm), "
                            "which the app cannot read yet.")
        route_modules(model, "BloomAttention", _attention)
        model.base_model.build_alibi_tensor = _key_positions  # a 4D mask of the app's has no 2D form to count along

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return BLOOM

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        d_head = attention.head_dim
        q, k, v = interleaved(affine(attention.query_key_value), d_head)  # from (d_model, heads x 3 x d_head)
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.dense)}, attention.num_heads,
                            attention.num_heads, d_head, scale, text)

    def sizes(self, config: Any, stack: str) -> Sizes:
        d_model = config.hidden_size
        return Sizes(config.n_head, config.n_head, d_model, d_model // config.n_head, 4 * d_model)

    def relative_positions(self, model: nn.Module, stack: str, length: int) -> RelativePositions:
        return alibi_positions(alibi_slopes(model.config.n_head).numpy(), length,
                               "ALiBi slopes, fixed by the number of heads (transformers' BLOOM), not learned")

    def score_bias(self, model: nn.Module, site: str, head: int, q_len: int, k_len: int) -> np.ndarray | None:
        return alibi_bias(float(alibi_slopes(model.config.n_head)[head]), q_len, k_len)


def alibi_slopes(heads: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(heads,) float32: each head's ALiBi slope, as BLOOM computes them."""
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    return _get_alibi_slopes(heads, torch.device(device)).float()


def _key_positions(attention_mask: torch.Tensor, heads: int, dtype: torch.dtype) -> torch.Tensor:
    """BloomModel's alibi, slope x key position (batch x heads, 1, k_len), from its 2D mask (positions counted along
    it, as BLOOM does) or from a 4D one of the app's ((batch, 1, q_len, k_len): positions 0 .. k_len - 1); in float32
    whatever the model's `dtype` (only the routed attention reads it, and its differences must stay exact)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    if attention_mask.dim() == 2:
        return build_alibi_tensor(attention_mask, heads, torch.float32)
    batch, k_len = attention_mask.size(0), attention_mask.size(-1)
    positions = torch.arange(k_len, device=attention_mask.device, dtype=torch.float32)
    slopes = alibi_slopes(heads, attention_mask.device)
    return (slopes[:, None] * positions).repeat(batch, 1)[:, None]


def _relative(alibi: torch.Tensor, batch: int, heads: int, q_len: int) -> torch.Tensor:
    """(batch, heads, q_len, k_len) float32: slope x (key position - query position) from BloomModel's alibi (slope x
    key position, (batch x heads, 1, k_len)), the queries being the last q_len positions. Made once per forward pass
    and q_len on a thread (every layer reads the same alibi, so a trace keeps one bias, as the longest input counts)."""
    def relative() -> torch.Tensor:
        by_key = alibi.float().view(batch, heads, 1, -1)
        return by_key - by_key[..., -q_len:].transpose(-1, -2)

    return made_once(alibi, ("relative", q_len), relative)


def _attention(self: nn.Module, hidden_states: torch.Tensor, residual: torch.Tensor, alibi: torch.Tensor,
               attention_mask: torch.Tensor | None, layer_past: Any = None, use_cache: bool = False,
               output_attentions: bool = False, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """BloomAttention's forward, softmax(Q K^T / √d_head + ALiBi + M) V by the app's attention. The bias is given
    as what it is, slope x (key position - query position), which softmax reads as BLOOM's slope x key position."""
    query, key, value = self._reshape(self.query_key_value(hidden_states))  # (batch, heads, len, d_head) each
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_idx)
    bias = _relative(alibi, query.size(0), self.num_heads, query.size(-2)).to(query.dtype)
    out, _ = attention(self, query, key, value, attention_mask, scaling=self.inv_norm_factor, position_bias=bias)
    out = nn.functional.dropout(self.dense(out.flatten(2)), self.hidden_dropout, self.training)
    return out + residual, None
