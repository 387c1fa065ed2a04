"""One side of an attention score, query or key, as an affine map of what the attention reads at each position.

A head turns its input x (d_model,) at position p into what its scores read: c_p x R_p(f_p ⊙ (x W + b)), with W, b
its W_Q, b_Q (or the key head's W_K, b_K, times what the keys are multiplied by after their projection: Falcon-H1's
key_multiplier); f_p the query/key norm's gain over the RMS of the whole projection (Qwen3,
Gemma 3, OLMo 2: that RMS frozen at the run's value, as a LayerNorm's scale is), else 1; R_p the rotary rotation at p
(rotary models: of the head's last numbers from `start` in multi-head latent attention, model/inspect/qk_latent.py),
else none; c_p Llama 4's norm after the rotation (frozen likewise) times its queries' temperature,
else 1. With the run's f_p and c_p the map is linear in x plus a constant, so a direction u of what attention reads
is the direction (c_p f_p ⊙ R_pᵀ u) Wᵀ of x, and the constant's share is b · (c_p f_p ⊙ R_pᵀ u): Rᵀ is the rotation
the other way (sin negated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attention_atlas.model.inspect.head_weights import HeadWeights, QueryKeyNorm
from attention_atlas.model.inspect.rotary import rotate


@dataclass(frozen=True)
class Side:
    """The map at n positions (arrays of one row broadcast to every row)."""

    w: np.ndarray  # (d_model, d_head) float64
    b: np.ndarray  # (d_head,)
    f: np.ndarray  # (n, d_head) the query/key norm's gain / RMS, frozen; ones where the model has none
    c: np.ndarray  # (n,) the norm after the rotation, frozen, x the temperature; ones where the model has none
    cos: np.ndarray | None  # (n, r) rotary tables at each row's position; None: no rotation
    sin: np.ndarray | None
    interleaved: bool = False
    start: int = 0  # the first rotated number of a head (multi-head latent attention: its rope part, after nope)
    deinterleaved: bool = False  # the rotated pairs (2i, 2i + 1) laid out [evens | odds] first (DeepSeek-V3)

    def read(self, x: np.ndarray) -> np.ndarray:
        """(n, d_head): what the scores read for x (n, d_model)."""
        return self.c[:, None] * self._turn((x @ self.w + self.b) * self.f, 1)

    def back(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((n, d_head), (n,)): for directions u (n, d_head) of what the scores read, the coefficients of the
        directions of x in the basis Wᵀ (d_head, d_model), and the constant's share: read(x) · u = x · (coefficients
        @ Wᵀ) + constant."""
        pulled = self.c[:, None] * self.f * self._turn(u, -1)  # (n, d_head)
        return pulled, pulled @ self.b

    def _turn(self, a: np.ndarray, sign: int) -> np.ndarray:
        """a (n, d_head) rotated by R (sign 1) or Rᵀ (sign -1) at each row's position."""
        if self.cos is None or self.sin is None:
            return a
        cos, sin = (torch.from_numpy(np.ascontiguousarray(t)) for t in (self.cos, sign * self.sin))
        part = a[:, self.start:]
        if self.deinterleaved and sign == 1:
            part = np.concatenate([part[:, 0::2], part[:, 1::2]], -1)
        turned = rotate(torch.from_numpy(np.ascontiguousarray(part)), cos, sin, self.interleaved).numpy()
        if self.deinterleaved and sign == -1:  # [evens | odds] back to the pairs' own places
            half = turned.shape[1] // 2
            turned = np.stack([turned[:, :half], turned[:, half:]], -1).reshape(turned.shape)
        return np.concatenate([a[:, :self.start], turned], -1)


def side_of(weights: HeadWeights, which: Literal["q", "k"], x: np.ndarray, positions: np.ndarray) -> Side:
    """The query (or key) side of `weights`'s head for x (n, d_model) what attention read at `positions` (n,): its
    norms' scales frozen at what they are for x."""
    w, b = (weights.w_q, weights.b_q) if which == "q" else (weights.w_k, weights.b_k)
    factor = 1.0 if which == "q" else weights.key_scale  # the keys multiplied after their projection (Falcon-H1)
    w = w.astype(np.float64) * factor
    b = np.zeros(w.shape[1]) if b is None else b.astype(np.float64) * factor
    x = x.astype(np.float64)
    projected = x @ w + b  # (n, d_head)
    f = _norm_factor(weights.q_norm if which == "q" else weights.k_norm, projected, x)
    cos = sin = None
    if weights.rotary is not None:
        cos, sin = (t[positions].astype(np.float64) for t in (weights.rotary.cos, weights.rotary.sin))
    side = Side(w, b, f, np.ones(len(x)), cos, sin, weights.rotary is not None and weights.rotary.interleaved)
    c = np.ones(len(x))
    if weights.l2_eps is not None:  # Llama 4: what attention reads divided by its root mean square, no gain
        c = 1 / np.sqrt((side.read(x) ** 2).mean(-1) + weights.l2_eps)
    if which == "q" and weights.query_scale is not None:
        c = c * weights.query_scale[positions]
    return Side(w, b, f, c, cos, sin, side.interleaved)


def _norm_factor(norm: QueryKeyNorm | None, projected: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(n, d_head): gain / RMS of the model's query/key norm, the RMS over the head's own numbers or over every
    head's (`whole`: then read from every head's projection of x); ones where there is no norm."""
    if norm is None:
        return np.ones_like(projected)
    spanned = projected if norm.whole is None else x @ norm.whole[0].astype(np.float64) + (
        0 if norm.whole[1] is None else norm.whole[1].astype(np.float64))
    rms = np.sqrt((spanned**2).mean(-1, keepdims=True) + norm.eps)  # (n, 1)
    return norm.gain.astype(np.float64) / rms
