"""MPT: computes attention in its own code (model/hf/own_attention.py routes it through the app's attention), with
ALiBi for positions, as BLOOM: each head adds slope x (key position - query position) to its scores, the slopes
1/2^(8 (h + 1) / heads) (transformers' `build_mpt_alibi_tensor`, alibi_bias_max 8). MPT hands its layers the bias of
each key, slope x (key position - last position), which softmax reads as the same. One `Wqkv` projection holds every
query head, then every key head, then every value head (clamped where the config sets clip_qkv); `out_proj` is W_O;
LayerNorms without a bias. Its MLP adds the residual itself, so its hooks are a table (discovery would read that sum
as the MLP's output): hook_mlp_out is `down_proj`'s output. Its bias covers max_seq_len keys: no longer input."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families.adapter import (
    Adapter,
    LayerWeights,
    RelativePositions,
    affine,
    alibi_bias,
    alibi_positions,
    split_columns,
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

BLOCK = "blocks.{i}"
MPT = Family(
    name="MPT",
    kind="decoder",
    positional="ALiBi",
    norm="pre-norm (LayerNorm)",
    stack_taps={"decoder": {
        "hook_embed": ("wte", output),
        **norm_hooks("ln_final", "norm_f", LAYER_NORM),
        "hook_resid_final": ("norm_f", output),
    }},
    layer_taps={"decoder": {
        "hook_resid_pre": (BLOCK, first_input),
        **norm_hooks("ln1", f"{BLOCK}.norm_1", LAYER_NORM),
        **attention_hooks("attn", f"{BLOCK}.attn"),
        "hook_attn_out": (f"{BLOCK}.attn.out_proj", output),
        "hook_resid_mid": (f"{BLOCK}.norm_2", first_input),
        **norm_hooks("ln2", f"{BLOCK}.norm_2", LAYER_NORM),
        "mlp.hook_pre": (f"{BLOCK}.ffn.up_proj", output),
        "mlp.hook_post": (f"{BLOCK}.ffn.down_proj", first_input),
        "hook_mlp_out": (f"{BLOCK}.ffn.down_proj", output),
        "hook_resid_post": (BLOCK, first_output),
    }},
    layer_counts={"decoder": lambda c: c.n_layers},
    position_bias=True,
    final_norm="norm_f",
)


class MptAdapter(Adapter):
    name = "MPT"
    model_types: ClassVar[tuple[str, ...]] = ("mpt",)
    own_attention = True

    def prepare(self, model: nn.Module) -> None:
        route_modules(model, "MptAttention", _attention)

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return MPT

    def position_limit(self, config: Any) -> int:
        return config.max_seq_len  # the ALiBi it builds covers this many keys

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        if attention.clip_qkv:
            raise UserError(f"this MPT clamps its queries, keys and values to ±{attention.clip_qkv:g} (clip_qkv), so "
                            "they are not one matrix a head times the stream, and its heads' weights cannot be shown.")
        d_model, d_head = attention.hidden_size, attention.head_dim
        q, k, v = split_columns(affine(attention.Wqkv), (d_model, d_model, d_model))  # [every q | every k | every v]
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights({"q": q, "k": k, "v": v, "o": affine(attention.out_proj)}, attention.n_heads,
                            attention.n_heads, d_head, scale, text)

    def scale(self, attention: nn.Module, d_head: int, layer: int) -> tuple[float, str]:
        scale = float(attention.softmax_scale)
        if math.isclose(scale, d_head ** -0.5):
            return scale, f"1/√{d_head}"
        return scale, f"{scale:g} (the model's softmax_scale)"

    def relative_positions(self, model: nn.Module, stack: str, length: int) -> RelativePositions:
        return alibi_positions(alibi_slopes(model.config.n_heads).numpy(), length,
                               "ALiBi slopes, fixed by the number of heads (transformers' MPT, alibi_bias_max 8), "
                               "not learned")

    def score_bias(self, model: nn.Module, site: str, head: int, q_len: int, k_len: int) -> np.ndarray | None:
        return alibi_bias(float(alibi_slopes(model.config.n_heads)[head]), q_len, k_len)


def alibi_slopes(heads: int) -> torch.Tensor:
    """(heads,) float32: each head's ALiBi slope, read from transformers' MPT bias of two keys (-slope, 0)."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    return -build_mpt_alibi_tensor(heads, 2)[:, 0, 0].float()


def _relative(by_key: torch.Tensor, q_len: int, k_len: int) -> torch.Tensor:
    """(1, heads, q_len, k_len) float32: slope x (key position - query position) from MPT's bias of each key (heads,
    1, max_seq_len): slope x (key - last), the queries the last q_len of the k_len positions. Made once per forward
    pass on a thread (every layer reads the same bias)."""
    if k_len > by_key.size(-1):
        raise UserError(f"MPT reads at most {by_key.size(-1)} tokens (max_seq_len: its ALiBi covers no more), "
                        f"not {k_len}.")

    def relative() -> torch.Tensor:
        keys = by_key[..., -k_len:].float()  # (heads, 1, k_len)
        return (keys - keys[..., -q_len:].transpose(-1, -2))[None]

    return made_once(by_key, ("relative", q_len, k_len), relative)


def _additive(hidden: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """MPT's boolean mask (batch, 1, q_len, k_len), True where a key is hidden, as the additive mask the app's
    attention reads (the dtype's least number where hidden, as MPT's masked_fill puts it); made once per mask."""
    if hidden is None:
        return None
    return made_once(hidden, ("additive", dtype), lambda: torch.zeros(hidden.shape, dtype=dtype, device=hidden.device)
                     .masked_fill(hidden, torch.finfo(dtype).min))


def _attention(self: nn.Module, hidden_states: torch.Tensor, position_bias: torch.Tensor, cache: Any = None,
               attention_mask: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """MptAttention's forward, softmax(Q K^T x softmax_scale + ALiBi + M) V by the app's attention. The bias is given
    as what it is, slope x (key position - query position)."""
    qkv = self.Wqkv(hidden_states)  # (batch, len, 3 d_model)
    if self.clip_qkv:
        qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    query, key, value = (part.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)
                         for part in qkv.chunk(3, dim=2))  # (batch, heads, len, d_head) each
    if cache is not None:
        key, value = cache.update(key, value, self.layer_idx)
    bias = _relative(position_bias, query.size(-2), key.size(-2)).to(query.dtype)
    out, _ = attention(self, query, key, value, _additive(attention_mask, query.dtype), scaling=self.softmax_scale,
                       position_bias=bias)
    return self.out_proj(out.flatten(2)), None  # out: (batch, len, heads, d_head)
