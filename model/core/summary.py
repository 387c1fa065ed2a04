"""A site's attention reduced in one pass, a block of query rows at a time: what the views that show every
head or every layer need, without holding any layer's (heads, q_len, k_len) pattern whole.

- thumbnails: each head's pattern shrunk to block means (the model view, `viz.thumbnails`);
- statistics: per head, entropy, mean distance and the shares to the first token, the previous one and itself,
  as sums over query rows (the Head statistics tab, and the head the app opens on);
- rollout (Abnar & Zuidema 2020) of a self-attention stack: heads averaged, the residual added (0.5 A + 0.5 I),
  layers multiplied. Exact up to ROLLOUT_SIZE positions; longer texts are cut into ROLLOUT_SIZE blocks of
  consecutive positions and each layer's head-averaged attention into block means, A_blocks[I, J] = mean over the
  queries i of I of the attention i puts on the keys of J (rows still sum to 1): the rollout of those block
  matrices approximates the exact one's block means. Exact: O(n³) a layer, 30 s for SmolLM2 at 2,048 tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from model.core.patterns import BlockMeans, block_starts
from model.core.trace import Site, Trace

STATISTICS = ("entropy (bits)", "mean distance", "to first token", "to previous token", "to itself")
ROLLOUT_SIZE = 512  # positions (or blocks of positions) a side of the rollout matrix


@dataclass(frozen=True)
class SiteSummary:
    """Every layer of one attention site, reduced."""

    thumbnails: np.ndarray  # (layers, heads, t_q, t_k) float32 block means, t = min(size, its length)
    statistics: np.ndarray  # (layers, heads, len(STATISTICS)) float64; NaN where a measure needs one sequence
    rollout: np.ndarray | None  # (b, b) float64, b = min(ROLLOUT_SIZE, n); None for cross-attention
    rollout_starts: np.ndarray  # (b + 1,) int: block I of the rollout covers positions starts[I]..starts[I+1]-1

    @property
    def nbytes(self) -> int:
        rollout = 0 if self.rollout is None else self.rollout.nbytes
        return self.thumbnails.nbytes + self.statistics.nbytes + rollout + self.rollout_starts.nbytes

    @property
    def rollout_is_exact(self) -> bool:
        """Whether every rollout block is one position."""
        return bool((np.diff(self.rollout_starts) == 1).all())


class _Statistics:
    """Per-head sums over query rows, divided into means at the end (float64)."""

    def __init__(self, heads: int, q_len: int, k_len: int, self_attention: bool) -> None:
        self.q_len, self.k_len = q_len, k_len
        self.one_sequence = self_attention and q_len == k_len
        self.sums = torch.zeros(heads, len(STATISTICS), dtype=torch.float64)

    def add(self, positions: np.ndarray, p: torch.Tensor) -> None:
        """p: (heads, rows, width) float32, the attention of the query rows at `positions` on keys 0..width-1
        (the others 0)."""
        entropy = -torch.special.xlogy(p, p).sum(-1) / np.log(2)  # (heads, rows); 0 log 0 = 0
        self.sums[:, 0] += entropy.double().sum(-1)
        self.sums[:, 2] += p[:, :, 0].double().sum(-1)
        if not self.one_sequence:
            return
        width = p.shape[-1]
        queries = torch.from_numpy(positions)
        distance = (queries[:, None] - torch.arange(width)[None, :]).abs().float()  # (rows, width)
        self.sums[:, 1] += (p * distance).sum(-1).double().sum(-1)
        rows = torch.arange(len(positions))
        for column, key in ((3, queries - 1), (4, queries)):  # the previous token, itself (0 where not computed)
            has = (key >= 0) & (key < width)
            self.sums[:, column] += p[:, rows[has], key[has]].double().sum(-1)

    def result(self) -> np.ndarray:
        """(heads, len(STATISTICS)) means over the queries (previous: over those that have one)."""
        counts = torch.tensor([self.q_len, self.q_len, self.q_len, max(self.q_len - 1, 1), self.q_len],
                              dtype=torch.float64)
        means = (self.sums / counts).numpy()
        if not self.one_sequence:
            means[:, [1, 3, 4]] = np.nan
        elif self.q_len < 2:
            means[:, 3] = np.nan
        return means


def summarise(layers: Iterator[Iterator[tuple[np.ndarray, torch.Tensor]]], shape: tuple[int, int, int], size: int,
              self_attention: bool) -> SiteSummary:
    """Reduce every layer of a site. `layers` yields, per layer, its pattern as (query positions, float32
    probabilities (heads, rows, width <= k_len), the keys after width 0) blocks covering every query row once, in
    order; shape: (heads, q_len, k_len) of each layer's pattern; size: the thumbnails' side."""
    heads, q_len, k_len = shape
    rolled = self_attention and q_len == k_len
    starts = block_starts(q_len, ROLLOUT_SIZE)
    thumbnails, statistics = [], []
    rollout: torch.Tensor | None = None  # (b, b) float64
    for blocks in layers:
        thumbnail = BlockMeans((heads,), q_len, k_len, size)
        stats = _Statistics(heads, q_len, k_len, self_attention)
        averaged = BlockMeans((), q_len, k_len, ROLLOUT_SIZE) if rolled else None
        for positions, p in blocks:
            start = int(positions[0])
            thumbnail.add(start, p)
            stats.add(positions, p)
            if averaged is not None:
                averaged.add(start, p.mean(0))
        thumbnails.append(thumbnail.result().numpy())
        statistics.append(stats.result())
        if averaged is not None:
            rollout = _roll(rollout, averaged, starts)
    return SiteSummary(np.stack(thumbnails), np.stack(statistics), None if rollout is None else rollout.numpy(),
                       starts)


def _roll(rollout: torch.Tensor | None, averaged: BlockMeans, starts: np.ndarray) -> torch.Tensor:
    """One more layer of rollout: 0.5 A + 0.5 I of the head-averaged block means (block sums over keys: rows of
    A sum to 1), rows renormalised, times the rollout so far."""
    counts = torch.from_numpy(np.diff(starts)).double()  # (b,) positions per block
    a = averaged.result().double() * counts[None, :]  # mean over a block's queries, sum over its keys
    a = 0.5 * a + 0.5 * torch.eye(len(counts), dtype=torch.float64)
    a /= a.sum(-1, keepdim=True)
    return a if rollout is None else a @ rollout


def summarise_site(trace: Trace, site: str, size: int) -> SiteSummary:
    """Every layer of `site` in `trace` reduced (thumbnails `size` a side), one block of query rows at a time."""
    layers = (trace.pattern_blocks(site, layer) for layer in range(trace.n_layers(site)))
    return summarise(layers, trace.shape(trace.pattern_name(site, 0)), size, not Site.of(site).is_cross)
