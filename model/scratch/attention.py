"""Scaled dot-product attention and multi-head attention (paper §3.2)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attention_atlas.model.core.capture.hooks import HookPoint

TensorHook = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    on_scores: TensorHook = _identity,
    on_pattern: TensorHook = _identity,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QK^T / sqrt(d_k)) V, always materialising the probabilities.

    q: (..., q_len, d_k); k: (..., k_len, d_k); v: (..., k_len, d_v).
    mask: bool, broadcastable to (..., q_len, k_len); True = the query may attend to the key.
    Every query must see at least one key. `on_scores` sees the scaled scores before masking,
    `on_pattern` the probabilities; both may return a replacement.
    Returns (output (..., q_len, d_v), probabilities (..., q_len, k_len)).
    """
    scores = on_scores(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))  # (..., q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    pattern = on_pattern(scores.softmax(dim=-1))  # (..., q_len, k_len); masked entries exactly 0
    return pattern @ v, pattern


class MultiHeadAttention(nn.Module):
    """h parallel attention heads with d_k = d_v = d_model / h, then the output projection W_O.

    The Q, K and V projections of all heads are one fused matrix `in_proj` of shape
    (3 * d_model, d_model), rows [W_Q; W_K; W_V], laid out as in `torch.nn.MultiheadAttention`.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.hook_q = HookPoint()  # (batch, heads, q_len, d_head)
        self.hook_k = HookPoint()  # (batch, heads, k_len, d_head)
        self.hook_v = HookPoint()  # (batch, heads, k_len, d_head)
        self.hook_attn_scores = HookPoint()  # (batch, heads, q_len, k_len): QK^T/sqrt(d_k) before the mask
        self.hook_pattern = HookPoint()  # (batch, heads, q_len, k_len): softmax probabilities
        self.hook_z = HookPoint()  # (batch, heads, q_len, d_head): each head's output before W_O

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: (batch, q_len, d_model) queries; memory: (batch, k_len, d_model) keys and values
        (None = self-attention on x); mask: bool (batch, 1, q_len, k_len), True = may attend."""
        d = self.out_proj.in_features
        if memory is None:
            q, k, v = self.in_proj(x).split(d, dim=-1)
        else:
            w, b = self.in_proj.weight, self.in_proj.bias
            q = F.linear(x, w[:d], b[:d])
            k, v = F.linear(memory, w[d:], b[d:]).split(d, dim=-1)
        q = self.hook_q(self._split_heads(q))
        k = self.hook_k(self._split_heads(k))
        v = self.hook_v(self._split_heads(v))
        z, _ = attention(q, k, v, mask, on_scores=self.hook_attn_scores, on_pattern=self.hook_pattern)
        z = self.hook_z(z)  # (batch, heads, q_len, d_head)
        return self.out_proj(self._merge_heads(z))

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, d_model) -> (batch, heads, len, d_head)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)

    @staticmethod
    def _merge_heads(z: torch.Tensor) -> torch.Tensor:
        """(batch, heads, len, d_head) -> (batch, len, d_model): Concat(head_1, ..., head_h)."""
        batch, heads, length, d_head = z.shape
        return z.transpose(1, 2).reshape(batch, length, heads * d_head)
