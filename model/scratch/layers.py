"""Positional encoding, the position-wise feed-forward network and one transformer layer."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import HookPoint
from attention_atlas.model.scratch.attention import MultiHeadAttention
from attention_atlas.model.scratch.config import TransformerConfig


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Returns (max_len, d_model), float32.
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (max_len, ceil(d_model / 2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class HookedLayerNorm(nn.LayerNorm):
    """LayerNorm (the same parameters as nn.LayerNorm) that shows what it divides by and its input so divided, before
    its weight and bias (as TransformerLens's LayerNorm)."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__(d_model, eps=eps)
        self.hook_scale = HookPoint()  # (batch, len, 1): the standard deviation it divides by
        self.hook_normalized = HookPoint()  # (batch, len, d_model): x centred and divided by it, before weight and bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)  # (batch, len, d_model)
        scale = self.hook_scale((centred.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(centred / scale) * self.weight + self.bias


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position separately."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.hook_pre = HookPoint()  # (batch, len, d_ff) before the ReLU
        self.hook_post = HookPoint()  # (batch, len, d_ff) after the ReLU: the FFN's hidden activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.hook_post(torch.relu(self.hook_pre(self.linear1(x))))
        return self.linear2(hidden)


class TransformerLayer(nn.Module):
    """An encoder layer (self-attention, FFN), a decoder layer (masked self-attention,
    cross-attention, FFN) or, without cross-attention and with a causal mask, a GPT block.

    Each sub-layer is wrapped in a residual connection and LayerNorm: post-norm
    LayerNorm(x + Dropout(Sublayer(x))) as in the paper, or pre-norm x + Dropout(Sublayer(LayerNorm(x))).
    The residual hooks hold the sums before any norm, as TransformerLens's do; a post-norm layer's output
    (its normalised stream) is `hook_normalized_resid_post`.
    """

    def __init__(self, cfg: TransformerConfig, cross_attention: bool) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.dropout = nn.Dropout(cfg.dropout)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads)
        self.ln1 = HookedLayerNorm(cfg.d_model, cfg.layer_norm_eps)  # at self-attention
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads) if cross_attention else None
        self.ln_cross = HookedLayerNorm(cfg.d_model, cfg.layer_norm_eps) if cross_attention else None
        self.mlp = FeedForward(cfg.d_model, cfg.d_ff)
        self.ln2 = HookedLayerNorm(cfg.d_model, cfg.layer_norm_eps)  # at the MLP
        # every hook below is (batch, len, d_model)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        if cross_attention:
            self.hook_cross_attn_out = HookPoint()
            self.hook_resid_mid_cross = HookPoint()
        if self.pre_norm:
            self.hook_mlp_in = HookPoint()  # what the MLP's norm alone reads (hook_resid_mid's value: TransformerLens's
            # hook_mlp_in), so that an edit there changes the MLP's input and not the stream
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        if not self.pre_norm:
            self.hook_normalized_resid_post = HookPoint()

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: (batch, len, d_model); mask: self-attention mask (batch, 1, len, len);
        memory: encoder output (batch, src_len, d_model) for cross-attention;
        memory_mask: (batch, 1, 1 or len, src_len). True = may attend."""
        x = self.hook_resid_pre(x)
        x = self._sublayer(x, lambda h: self.attn(h, mask=mask), self.ln1, self.hook_attn_out, self.hook_resid_mid)
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("a decoder layer with cross-attention needs the encoder memory")
            cross = self.cross_attn
            x = self._sublayer(x, lambda h: cross(h, memory, memory_mask), self.ln_cross, self.hook_cross_attn_out,
                               self.hook_resid_mid_cross)
        mlp_in = self.hook_mlp_in if self.pre_norm else None
        x = self._sublayer(x, self.mlp, self.ln2, self.hook_mlp_out, self.hook_resid_post, mlp_in)
        return x if self.pre_norm else self.hook_normalized_resid_post(x)

    def _sublayer(
        self,
        x: torch.Tensor,
        sublayer: Callable[[torch.Tensor], torch.Tensor],
        norm: HookedLayerNorm,
        out_hook: HookPoint,
        sum_hook: HookPoint,
        in_hook: HookPoint | None = None,
    ) -> torch.Tensor:
        """Residual connection and LayerNorm around one sub-layer, post- or pre-norm; `sum_hook` sees the
        residual sum before any norm; `in_hook` (pre-norm) what the sub-layer's norm alone reads, the stream
        itself unless an edit changes it there."""
        if self.pre_norm:
            read = x if in_hook is None else in_hook(x)
            return sum_hook(x + self.dropout(out_hook(sublayer(norm(read)))))
        return norm(sum_hook(x + self.dropout(out_hook(sublayer(x)))))


def embedding_scale(d_model: int) -> float:
    """Embeddings are multiplied by sqrt(d_model) (paper §3.4)."""
    return math.sqrt(d_model)
