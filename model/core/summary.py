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

A Hugging Face run makes it in its capture, a layer at a time as the forward pass reports each pattern, on the
model's device (`SiteSummariser`; model/core/capture.py, RunOptions.summary_size), from the probabilities that
also make the layer's attention output (model/core/patterns.py PatternInputs.summary_blocks); `summarise_site`
makes it from a trace afterwards (the toy models, whose patterns are captured whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.core.patterns import BlockMeans, block_starts
from model.core.sites import Site

if TYPE_CHECKING:  # a trace's patterns are read, never made, here
    from model.core.trace import Trace

STATISTICS = ("entropy (bits)", "mean distance", "to first token", "to previous token", "to itself")
ROLLOUT_SIZE = 512  # positions (or blocks of positions) a side of the rollout matrix


@dataclass(frozen=True)
class SiteSummary:
    """Every layer of one attention site, reduced."""

    thumbnails: np.ndarray  # (layers, heads, t_q, t_k) float32 block means, t = min(size, its length)
    statistics: np.ndarray  # (layers, heads, len(STATISTICS)) float64; NaN where a measure needs one sequence
    rollout: np.ndarray | None  # (b, b) float32, b = min(ROLLOUT_SIZE, n); None for cross-attention
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
    """Per-head sums over query rows, divided into means at the end (float64, where the rows' device has it)."""

    def __init__(self, heads: int, q_len: int, k_len: int, self_attention: bool) -> None:
        self.q_len, self.k_len = q_len, k_len
        self.one_sequence = self_attention and q_len == k_len
        self.sums = torch.zeros(heads, len(STATISTICS), dtype=torch.float64)

    def add(self, positions: np.ndarray, p: torch.Tensor, entropy: torch.Tensor | None = None) -> None:
        """p: (heads, rows, width) float32, the attention of the query rows at `positions` (consecutive) on keys
        0..width-1 (the others 0), on any device (the sums move there); entropy: (heads, rows) in bits, if known."""
        if self.sums.device != p.device:
            self.sums = self.sums.to(p.device, torch.float32 if p.device.type == "mps" else torch.float64)
        exact = self.sums.dtype
        if entropy is None:
            entropy = -torch.special.xlogy(p, p).sum(-1) / np.log(2)  # (heads, rows); 0 log 0 = 0
        self.sums[:, 0] += entropy.to(exact).sum(-1)
        self.sums[:, 2] += p[:, :, 0].to(exact).sum(-1)
        if self.one_sequence:
            self.sums[:, 1] += _distance_sums(positions, p).to(exact)
            queries = torch.from_numpy(positions).to(p.device)
            rows, width = torch.arange(len(positions), device=p.device), p.shape[-1]
            for column, key in ((3, queries - 1), (4, queries)):  # the previous token, itself (0 where not computed)
                has = (key >= 0) & (key < width)
                self.sums[:, column] += p[:, rows[has], key[has]].to(exact).sum(-1)

    def result(self) -> np.ndarray:
        """(heads, len(STATISTICS)) means over the queries (previous: over those that have one)."""
        counts = torch.tensor([self.q_len, self.q_len, self.q_len, max(self.q_len - 1, 1), self.q_len],
                              dtype=torch.float64)
        means = (self.sums.cpu().double() / counts).numpy()
        if not self.one_sequence:
            means[:, [1, 3, 4]] = np.nan
        elif self.q_len < 2:
            means[:, 3] = np.nan
        return means


def _distance_sums(positions: np.ndarray, p: torch.Tensor) -> torch.Tensor:
    """(heads,) the sum over these rows of sum_k p[i, k] |i - k| (positions: the rows' query positions, consecutive):
    sum_k p (i - k) = i sum_k p - sum_k p k (a matrix-vector product), plus 2 p (k - i) for the keys after i, which
    lie within the band of columns after the block's first row (a causal block's future: at most ROW_BLOCK wide)."""
    width, first = p.shape[-1], int(positions[0])
    keys = torch.arange(width, device=p.device, dtype=p.dtype)
    queries = torch.from_numpy(positions).to(p.device, p.dtype)
    sums = queries * p.sum(-1) - p @ keys  # (heads, rows)
    if width > first + 1:
        ahead = (keys[first + 1 :][None, :] - queries[:, None]).clamp_(min=0)  # (rows, band): k - i where k > i
        sums += 2 * torch.linalg.vecdot(p[:, :, first + 1 :], ahead)
    return sums.sum(-1)


Block = tuple[np.ndarray, torch.Tensor] | tuple[np.ndarray, torch.Tensor, torch.Tensor]


class SiteSummariser:
    """A site's summary made one layer at a time, in layer order (as a forward pass reaches them)."""

    def __init__(self, shape: tuple[int, int, int], size: int, self_attention: bool) -> None:
        """shape: (heads, q_len, k_len) of each layer's pattern; size: the thumbnails' side."""
        self.shape, self.size, self.self_attention = shape, size, self_attention
        self.rolled = self_attention and shape[1] == shape[2]
        self.starts = block_starts(shape[1], ROLLOUT_SIZE)
        self.thumbnails: list[np.ndarray] = []
        self.statistics: list[np.ndarray] = []
        self.rollout: torch.Tensor | None = None  # (b, b) float32, on the rows' device

    def add_layer(self, blocks: Iterator[Block]) -> None:
        """The next layer's pattern as (query positions, float32 probabilities (heads, rows, width <= k_len), the
        keys after width 0[, the rows' entropy in bits (heads, rows)]) blocks of consecutive rows covering every
        query row once, in order."""
        heads, q_len, k_len = self.shape
        thumbnail = BlockMeans((heads,), q_len, k_len, self.size)
        stats = _Statistics(heads, q_len, k_len, self.self_attention)
        averaged = BlockMeans((), q_len, k_len, ROLLOUT_SIZE) if self.rolled else None
        for positions, p, *entropy in blocks:
            start = int(positions[0])
            thumbnail.add(start, p)
            stats.add(positions, p, *entropy)
            if averaged is not None:
                averaged.add(start, p.sum(0) / heads)
        self.thumbnails.append(thumbnail.result().numpy())
        self.statistics.append(stats.result())
        if averaged is not None:
            self.rollout = _roll(self.rollout, averaged, self.starts)

    def result(self) -> SiteSummary:
        return SiteSummary(np.stack(self.thumbnails), np.stack(self.statistics),
                           None if self.rollout is None else self.rollout.cpu().numpy(), self.starts)


def summarise(layers: Iterator[Iterator[Block]], shape: tuple[int, int, int], size: int,
              self_attention: bool) -> SiteSummary:
    """Reduce every layer of a site (`SiteSummariser`), given as an iterator of each layer's blocks."""
    summariser = SiteSummariser(shape, size, self_attention)
    for blocks in layers:
        summariser.add_layer(blocks)
    return summariser.result()


def _roll(rollout: torch.Tensor | None, averaged: BlockMeans, starts: np.ndarray) -> torch.Tensor:
    """One more layer of rollout: 0.5 A + 0.5 I of the head-averaged block means (block sums over keys: rows of
    A sum to 1), rows renormalised, times the rollout so far: float32, where the rows are (float64 cost twice as
    long, and a layer's product was a tenth of a 512-token forward pass on the CPU)."""
    means = averaged.means()  # (b, b) float32
    counts = torch.from_numpy(np.diff(starts)).to(means)  # (b,) positions per block
    a = means * counts[None, :]  # mean over a block's queries, sum over its keys
    a = 0.5 * a + 0.5 * torch.eye(len(counts), device=a.device)
    a /= a.sum(-1, keepdim=True)
    return a if rollout is None else a @ rollout


def summarise_site(trace: Trace, site: str, size: int) -> SiteSummary:
    """Every layer of `site` in `trace` reduced (thumbnails `size` a side), one block of query rows at a time."""
    layers = (trace.pattern_blocks(site, layer) for layer in range(trace.n_layers(site)))
    return summarise(layers, trace.shape(trace.pattern_name(site, 0)), size, not Site.of(site).is_cross)
