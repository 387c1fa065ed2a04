"""One attention head computed again by hand, in numpy, from its weights and its input: every step kept.

softmax(mask(scale · Q Kᵀ + bias)) V with Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V, the
rotary rotation applied to Q and K where the model has one. In float64, so that what differs from the
model's own float32 numbers is the model's rounding, not this file's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.inspect.head_weights import HeadWeights


@dataclass(frozen=True)
class HeadSteps:
    """Each intermediate of one head, computed in float64 and kept as float32 (half the memory of a cache entry)."""

    q: np.ndarray  # (q_len, d_head), before any rotation
    k: np.ndarray  # (k_len, d_head)
    v: np.ndarray  # (k_len, d_head)
    rot_q: np.ndarray | None  # (q_len, d_head) after the rotary rotation (rotary models only)
    rot_k: np.ndarray | None  # (k_len, d_head)
    qk: np.ndarray  # (q_len, k_len): Q Kᵀ (of the rotated Q and K in rotary models)
    scores: np.ndarray  # (q_len, k_len): x scale (+ position bias)
    masked: np.ndarray  # (q_len, k_len): -inf where the mask hides the key
    pattern: np.ndarray  # (q_len, k_len): softmax over keys
    z: np.ndarray  # (q_len, d_head): pattern @ V

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (a cache counts them)."""
        return sum(a.nbytes for a in vars(self).values() if a is not None)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """(len, d_head) rotated as Llama does: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]."""
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[:, half:], x[:, :half]], axis=-1) * sin


def _project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    out = x.astype(np.float64) @ w.astype(np.float64)
    return out if b is None else out + b


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of -inf only would be NaN (masks never leave a query no key)."""
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def compute_head(weights: HeadWeights, x: np.ndarray, x_kv: np.ndarray, mask: np.ndarray) -> HeadSteps:
    """x: (q_len, d_model) what the queries read; x_kv: (k_len, d_model) what keys and values read (x itself in
    self-attention); mask: (q_len, k_len) bool, True = may attend."""
    q, k, v = (_project(x, weights.w_q, weights.b_q), _project(x_kv, weights.w_k, weights.b_k),
               _project(x_kv, weights.w_v, weights.b_v))
    rot_q = rot_k = None
    if weights.rotary is not None:
        cos, sin = (t.astype(np.float64) for t in weights.rotary)  # (len, d_head)
        rot_q, rot_k = rotate(q, cos[: len(q)], sin[: len(q)]), rotate(k, cos[: len(k)], sin[: len(k)])
    qk = (q if rot_q is None else rot_q) @ (k if rot_k is None else rot_k).T  # (q_len, k_len)
    scores = qk * weights.scale
    if weights.position_bias is not None:
        scores = scores + weights.position_bias
    masked = np.where(mask, scores, -np.inf)
    pattern = softmax_rows(masked)
    steps = (q, k, v, rot_q, rot_k, qk, scores, masked, pattern, pattern @ v)
    return HeadSteps(*(None if a is None else a.astype(np.float32) for a in steps))


def concat_heads(z: np.ndarray) -> np.ndarray:
    """(heads, len, d_head) -> (len, heads * d_head): Concat(head_1, ..., head_h), head 0's columns first."""
    heads, length, d_head = z.shape
    return z.transpose(1, 0, 2).reshape(length, heads * d_head)


def output_projection(z: np.ndarray, weights: HeadWeights) -> np.ndarray:
    """(heads, len, d_head) every head's output -> (len, d_model): Concat(heads) W_O + b_O."""
    return _project(concat_heads(z), weights.w_o, weights.b_o)
