"""One attention head computed again by hand, in numpy, from its weights and its input: every step kept.

softmax(mask(scale · Q Kᵀ + bias)) V with Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V; where the model
has them, the keys multiplied (Falcon-H1's key_multiplier), Q and K normalised (query/key norms), then rotated
(rotary), normalised again (Llama 4's qk-norm), the queries scaled by position (Llama 4's temperature tuning), and the
scores soft-capped. In float64, so
that what differs from the model's own float32 numbers is the model's rounding, not this file's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attention_atlas.model.inspect.head_weights import HeadWeights, QueryKeyNorm
from attention_atlas.model.inspect.rotary import rotate


@dataclass(frozen=True)
class HeadSteps:
    """Each intermediate of one head, computed in float64 and kept as float32 (half the memory of a cache entry)."""

    q: np.ndarray  # (q_len, d_head), before any rotation
    k: np.ndarray  # (k_len, d_head)
    v: np.ndarray  # (k_len, d_head)
    rot_q: np.ndarray | None  # (q_len, d_head) what attention read: after the query norm and the rotation, if any
    rot_k: np.ndarray | None  # (k_len, d_head)
    qk: np.ndarray  # (q_len, k_len): Q Kᵀ (of the rotated Q and K in rotary models)
    scores: np.ndarray  # (q_len, k_len): x scale (+ position bias)
    masked: np.ndarray  # (q_len, k_len): -inf where the mask hides the key
    pattern: np.ndarray  # (q_len, k_len): softmax over keys
    z: np.ndarray  # (q_len, d_value): pattern @ V
    c_q: np.ndarray | None = None  # (q_len, q_rank) multi-head latent attention: the queries' normalised latent
    c_kv: np.ndarray | None = None  # (k_len, rank) the keys' and values' normalised latent
    gates: np.ndarray | None = None  # (q_len, heads x d_head) every head's output gate, where the model has them

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (a cache counts them)."""
        return sum(a.nbytes for a in vars(self).values() if a is not None)


def _project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    out = x.astype(np.float64) @ w.astype(np.float64)
    return out if b is None else out + b


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of -inf only would be NaN (masks never leave a query no key)."""
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def compute_head(weights: HeadWeights, x: np.ndarray, x_kv: np.ndarray, mask: np.ndarray) -> HeadSteps:
    """x: (q_len, d_model) what the queries read; x_kv: (k_len, d_model) what keys and values read (x itself in
    self-attention); mask: (q_len, k_len) bool, True = may attend (a sliding-window layer's: its window too)."""
    if weights.latent is not None:
        q, k, v, rot_q, rot_k, c_q, c_kv = _latent_heads(weights, x)
        return _scored(weights, q, k, v, rot_q, rot_k, mask, c_q, c_kv)
    q, k, v = (_project(x, weights.w_q, weights.b_q), _project(x_kv, weights.w_k, weights.b_k),
               _project(x_kv, weights.w_v, weights.b_v))
    rot_q = rot_k = None
    changed = (weights.rotary, weights.q_norm, weights.l2_eps, weights.query_scale)
    if weights.key_scale != 1.0 or any(a is not None for a in changed):  # what attention reads: the keys multiplied,
        rot_q, rot_k = _normalised(q, x, weights.q_norm), _normalised(k * weights.key_scale, x_kv, weights.k_norm)
        if weights.rotary is not None:  # normalised, rotated, normalised again (Llama 4), the queries scaled
            r = weights.rotary
            cos, sin = torch.from_numpy(r.cos).double(), torch.from_numpy(r.sin).double()  # (len, r)
            rot_q, rot_k = (rotate(torch.from_numpy(a), cos[: len(a)], sin[: len(a)], r.interleaved).numpy()
                            for a in (rot_q, rot_k))
        if weights.l2_eps is not None:
            rot_q, rot_k = (a / np.sqrt((a**2).mean(-1, keepdims=True) + weights.l2_eps) for a in (rot_q, rot_k))
        if weights.query_scale is not None:
            rot_q = rot_q * weights.query_scale[: len(rot_q), None]
    return _scored(weights, q, k, v, rot_q, rot_k, mask, None, None, output_gates(weights, x))


def _scored(weights: HeadWeights, q: np.ndarray, k: np.ndarray, v: np.ndarray, rot_q: np.ndarray | None,
            rot_k: np.ndarray | None, mask: np.ndarray, *latents: np.ndarray | None) -> HeadSteps:
    """The steps from Q and K as attention reads them to Z."""
    qk = (q if rot_q is None else rot_q) @ (k if rot_k is None else rot_k).T  # (q_len, k_len)
    scores = qk * weights.scale
    if weights.softcap is not None:
        scores = np.tanh(scores / weights.softcap) * weights.softcap
    if weights.position_bias is not None:
        scores = scores + weights.position_bias
    masked = np.where(mask, scores, -np.inf)
    if weights.sink is None:
        pattern = softmax_rows(masked)
    else:  # the sink's logit one more column of every row, its probability dropped (GPT-OSS)
        pattern = softmax_rows(np.concatenate([masked, np.full((len(masked), 1), weights.sink)], -1))[:, :-1]
    steps = (q, k, v, rot_q, rot_k, qk, scores, masked, pattern, pattern @ v, *latents)
    return HeadSteps(*(None if a is None else a.astype(np.float32) for a in steps))


def _latent_heads(weights: HeadWeights, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                 np.ndarray, np.ndarray | None, np.ndarray]:
    """Multi-head latent attention's q, k, v, rotated q and k (heads [nope | rope]), and its two latents (self-attention
    only): the rotation turns the rope part, of the query and of the key part every head shares."""
    latent = weights.latent
    assert latent is not None
    c_q = None if latent.q_a is None else _normalised(_project(x, *latent.q_a), x, latent.q_norm)
    q = _project(x if c_q is None else c_q, weights.w_q, weights.b_q)  # (len, nope + rope)
    both = _project(x, *latent.kv_a)  # (len, rank + rope)
    c_kv = _normalised(both[:, : latent.rank], x, latent.kv_norm)
    k, v = np.concatenate([c_kv @ weights.w_k, both[:, latent.rank:]], -1), c_kv @ weights.w_v.astype(np.float64)
    rot_q, rot_k = q.copy(), k.copy()
    if weights.rotary is not None:
        r = weights.rotary
        cos, sin = torch.from_numpy(r.cos).double(), torch.from_numpy(r.sin).double()  # (len, rope)
        for a in (rot_q, rot_k):
            part = a[:, latent.nope:]
            if latent.deinterleaved:  # (2i, 2i + 1) rotated, then laid out [evens | odds]: the same as the halves
                part = np.concatenate([part[:, 0::2], part[:, 1::2]], -1)  # of [evens | odds] rotated
            a[:, latent.nope:] = rotate(torch.from_numpy(part), cos[: len(a)], sin[: len(a)], r.interleaved).numpy()
    return q, k, v, rot_q, rot_k, c_q, c_kv


def _normalised(projected: np.ndarray, x: np.ndarray, norm: QueryKeyNorm | None) -> np.ndarray:
    """(len, d_head) queries or keys after the model's RMSNorm of them, if it has one: over the head's own numbers,
    or over every head's (the layer's whole projection of x)."""
    if norm is None:
        return projected
    spanned = projected if norm.whole is None else _project(x, *norm.whole)  # (len, d_head or heads x d_head)
    rms = np.sqrt((spanned**2).mean(-1, keepdims=True) + norm.eps)
    return projected / rms * norm.gain


def concat_heads(z: np.ndarray) -> np.ndarray:
    """(heads, len, d_head) -> (len, heads * d_head): Concat(head_1, ..., head_h), head 0's columns first."""
    heads, length, d_head = z.shape
    return z.transpose(1, 0, 2).reshape(length, heads * d_head)


def output_gates(weights: HeadWeights, x: np.ndarray) -> np.ndarray | None:
    """(len, heads x d_head): sigmoid(X W_G + b_G), what each head's output is multiplied by before W_O (Qwen3-Next,
    Qwen3.5), from x (len, d_model) what the queries read; None where the model has no gates."""
    return None if weights.gate is None else 1 / (1 + np.exp(-_project(x, *weights.gate)))


def output_projection(z: np.ndarray, weights: HeadWeights, x: np.ndarray | None = None) -> np.ndarray:
    """(heads, len, d_value) every head's output -> (len, d_model): Concat(heads) W_O + b_O, each head's output
    multiplied by its gate first where the model gates them (then x, (len, d_model) what the queries read, is
    needed)."""
    concat = concat_heads(z)
    if weights.gate is not None:
        if x is None:
            raise ValueError("This model gates each head's output by its input: the projection needs it.")
        concat = concat * output_gates(weights, x)
    return _project(concat, weights.w_o, weights.b_o)
