"""The sinusoidal positional encoding of Vaswani et al. (2017) and its properties, in float64 numpy.

PE(pos, 2i) = sin(pos ω_i), PE(pos, 2i+1) = cos(pos ω_i), ω_i = 1 / 10000^(2i/d). Each pair (2i, 2i+1) is a
point on a circle turning at speed ω_i, so moving k positions is a rotation of every pair by the angle k ω_i:
PE(pos + k) = R(k) PE(pos), R(k) block-diagonal with the 2x2 blocks [[cos kω_i, sin kω_i], [-sin kω_i, cos kω_i]].
"""

from __future__ import annotations

import numpy as np

BASE = 10000.0
MAX_D_MODEL = 8192  # wider than any model in the app by far; beyond this a table is a typo, not a question


def check_table_size(length: int, d_model: int, max_len: int) -> str | None:
    """Why a table of `length` positions and `d_model` dimensions cannot be drawn (None: it can)."""
    if length < 1:
        return "The length must be at least 1 position."
    if length > max_len:
        return f"The length must be at most {max_len:,}: the longest sequence this model reads."
    if d_model < 2 or d_model > MAX_D_MODEL:
        return f"d_model must be between 2 and {MAX_D_MODEL:,}, not {d_model:,}."
    if d_model % 2:
        return f"d_model must be even ({d_model} is odd): each frequency takes two dimensions, a sine and a cosine."
    return None


def frequencies(d_model: int, base: float = BASE) -> np.ndarray:
    """(d_model / 2,) ω_i = 1 / base^(2i / d_model), radians per position."""
    return 1.0 / base ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def sinusoid(length: int, d_model: int) -> np.ndarray:
    """(length, d_model) float64: sines in the even dimensions, cosines in the odd ones."""
    angle = np.arange(length, dtype=np.float64)[:, None] * frequencies(d_model)  # (length, d_model / 2)
    table = np.empty((length, d_model), dtype=np.float64)
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def rotation_blocks(k: int, d_model: int) -> np.ndarray:
    """(d_model / 2, 2, 2): the blocks of R(k), one per pair (sin, cos) of dimensions."""
    c, s = np.cos(k * frequencies(d_model)), np.sin(k * frequencies(d_model))  # (d_model / 2,)
    return np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)


def shifted(table: np.ndarray, k: int) -> np.ndarray:
    """(length - k, d_model): R(k) PE(pos) for every pos with pos + k in the table."""
    length, d_model = table.shape
    pairs = table[: length - k].reshape(length - k, d_model // 2, 2)  # (pos, pair, [sin, cos])
    return np.einsum("pab,npb->npa", rotation_blocks(k, d_model), pairs).reshape(length - k, d_model)


def shift_error(table: np.ndarray, k: int) -> float:
    """max |R(k) PE(pos) - PE(pos + k)| over every pos and dimension (0.0 when k leaves no pair)."""
    if k >= len(table):
        return 0.0
    return float(np.abs(shifted(table, k) - table[k:]).max())


def similarity(table: np.ndarray, cosine: bool = False) -> np.ndarray:
    """(length, length): the dot product (or cosine) of every pair of position vectors (rows of `table`)."""
    rows = np.asarray(table, dtype=np.float64)
    if cosine:
        rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows @ rows.T


def distance_profile(matrix: np.ndarray) -> np.ndarray:
    """(length,): the mean of each diagonal k = 0, 1, ... of a (length, length) similarity: similarity vs offset.
    For the sinusoid every diagonal is constant: PE(pos) · PE(pos + k) = Σ_i cos(k ω_i)."""
    return np.array([np.diagonal(matrix, k).mean() for k in range(len(matrix))])
