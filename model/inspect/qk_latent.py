"""One side of a multi-head latent attention score (DeepSeek-V2/V3, Kimi-Linear's softmax layers) as the affine map of
what attention reads that model/inspect/qk_sides.py's `Side` is, its latents' norms frozen at the run's values.

The key of a head at position p is [c_p W_K | R_p(r_p)]: c_p = g ⊙ (x W_kv + b_kv) / s_p the keys' and values'
latent (the first `rank` columns of the shared projection) through its RMSNorm, s_p that latent's root mean square
at p, and r_p = x W_r + b_r the rotary part every head shares (its last `rope` columns). With s_p frozen the key is
(x W + b) ⊙ f_p, W = [W_kv diag(g) W_K | W_r], b = [b_kv diag(g) W_K | b_r], f_p = [1/s_p ... | 1 ...]; rotated after
its first `nope` numbers. The query is x W_Q, or where the model has a query latent, (x W_qa diag(g_q) W_Q +
b_qa diag(g_q) W_Q) / s_q,p with s_q,p that latent's root mean square: [nope | rope], rotated likewise.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from attention_atlas.model.inspect.head_weights import HeadWeights, QueryKeyNorm
from attention_atlas.model.inspect.qk_sides import Side


def latent_side(weights: HeadWeights, which: Literal["q", "k"], x: np.ndarray, positions: np.ndarray) -> Side:
    """The query (or key) side of `weights`'s latent head for x (n, d_model) what attention read at `positions` (n,),
    its latents' norms frozen at what they are for x."""
    latent = weights.latent
    assert latent is not None
    x = x.astype(np.float64)
    if which == "q" and latent.q_a is None:
        w, b, f = weights.w_q.astype(np.float64), np.zeros(weights.d_head), np.ones((len(x), weights.d_head))
    elif which == "q":
        w_a = latent.q_a[0].astype(np.float64)  # (d_model, q_rank)
        b_a = np.zeros(w_a.shape[1]) if latent.q_a[1] is None else latent.q_a[1].astype(np.float64)
        gain, rms = _frozen(latent.q_norm, x @ w_a + b_a)  # (q_rank,), (n, 1)
        w_q = weights.w_q.astype(np.float64)
        w, b, f = (w_a * gain) @ w_q, (b_a * gain) @ w_q, np.broadcast_to(1 / rms, (len(x), weights.d_head))
    else:
        w_kv = latent.kv_a[0].astype(np.float64)  # (d_model, rank + rope)
        b_kv = np.zeros(w_kv.shape[1]) if latent.kv_a[1] is None else latent.kv_a[1].astype(np.float64)
        rank, w_k = latent.rank, weights.w_k.astype(np.float64)  # (rank, nope)
        gain, rms = _frozen(latent.kv_norm, x @ w_kv[:, :rank] + b_kv[:rank])
        w = np.concatenate([(w_kv[:, :rank] * gain) @ w_k, w_kv[:, rank:]], 1)  # (d_model, nope + rope)
        b = np.concatenate([(b_kv[:rank] * gain) @ w_k, b_kv[rank:]])
        f = np.concatenate([np.broadcast_to(1 / rms, (len(x), latent.nope)), np.ones((len(x), latent.rope))], 1)
    rotary = weights.rotary
    cos = sin = None
    if rotary is not None:
        cos, sin = (t[positions].astype(np.float64) for t in (rotary.cos, rotary.sin))
    return Side(w, b, np.ascontiguousarray(f), np.ones(len(x)), cos, sin, rotary is not None and rotary.interleaved,
                latent.nope, latent.deinterleaved)


def _frozen(norm: QueryKeyNorm | None, latent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gain (width,), root mean square (n, 1)) of the RMSNorm of `latent` (n, width); a gain of 1 and 1 without one."""
    if norm is None:
        return np.ones(latent.shape[1]), np.ones((len(latent), 1))
    return norm.gain.astype(np.float64), np.sqrt((latent**2).mean(-1, keepdims=True) + norm.eps)
