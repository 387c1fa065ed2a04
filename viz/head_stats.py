"""Numbers that describe attention heads, and attention rollout. numpy in, numpy/pandas out."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd


def head_statistics(pattern: np.ndarray, self_attention: bool = True) -> pd.DataFrame:
    """Per-head summary of one layer's attention, pattern (heads, q_len, k_len), rows summing to 1.

    entropy (bits, mean over queries), mean distance |q - k| weighted by attention, and the mean
    share of attention given to the first key, to the previous position and to itself. Distance,
    previous and self need queries and keys on the same sequence (NaN for cross-attention).
    """
    p = np.asarray(pattern, dtype=np.float64)
    heads, q_len, k_len = p.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log2(p), 0.0).sum(-1).mean(-1)  # (heads,); 0 log 0 = 0
    table = {"entropy (bits)": entropy, "to first token": p[:, :, 0].mean(-1)}
    if self_attention and q_len == k_len:
        positions = np.arange(q_len)
        distance = np.abs(positions[:, None] - positions[None, :])  # (q, k)
        table["mean distance"] = (p * distance).sum(-1).mean(-1)
        table["to previous token"] = p[:, positions[1:], positions[1:] - 1].mean(-1) if q_len > 1 else np.nan
        table["to itself"] = p[:, positions, positions].mean(-1)
    else:
        table |= {"mean distance": np.nan, "to previous token": np.nan, "to itself": np.nan}
    frame = pd.DataFrame(table, index=pd.RangeIndex(heads, name="head"))
    return frame[["entropy (bits)", "mean distance", "to first token", "to previous token", "to itself"]]


def attention_rollout(layer_patterns: Iterable[np.ndarray]) -> np.ndarray:
    """Abnar & Zuidema (2020): average the heads, add the residual (0.5 A + 0.5 I), renormalise the
    rows, and multiply the layers from the first to the last. Each pattern (heads, n, n) -> (n, n):
    how much each output position draws on each input token through all the layers. Given a generator, only one
    layer's pattern is held at once."""
    rollout: np.ndarray | None = None
    for pattern in layer_patterns:
        a = np.asarray(pattern, dtype=np.float64).mean(0)  # (n, n)
        a = 0.5 * a + 0.5 * np.eye(a.shape[0])
        a /= a.sum(-1, keepdims=True)
        rollout = a if rollout is None else a @ rollout
    if rollout is None:
        raise ValueError("attention rollout needs at least one layer")
    return rollout


def previous_token_share(pattern: np.ndarray) -> np.ndarray:
    """(heads, n, n) self-attention -> (heads,): the mean weight each query (but the first) puts on the one before."""
    n = pattern.shape[-1]
    if n < 2:
        return np.zeros(pattern.shape[0])
    rows = np.arange(1, n)
    return np.asarray(pattern[:, rows, rows - 1], dtype=np.float64).mean(-1)


def previous_token_head(layer_patterns: Iterable[np.ndarray]) -> tuple[int, int, float]:
    """The (layer, head) of a self-attention stack that attends most to the previous token, and that share:
    the clearest structure to open an app on."""
    shares = np.stack([previous_token_share(p) for p in layer_patterns])  # (layers, heads)
    layer, head = np.unravel_index(int(shares.argmax()), shares.shape)
    return int(layer), int(head), float(shares[layer, head])
