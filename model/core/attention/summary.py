"""A site's attention reduced in one pass, a block of query rows at a time: what the views that show every
head or every layer need, without holding any layer's (heads, q_len, k_len) pattern whole.

- thumbnails: each head's pattern shrunk to block means (the model view, `viz.thumbnails`);
- statistics: per head, entropy, mean distance and the shares to the first token, the previous one and itself,
  the first and previous token's again over the queries from ROLE_FROM on, the share on each query's induction
  target (the token after its last occurrence), and the mean distance less the first token's part (a sink, far
  from every later query, weighs on the mean distance of a head that otherwise looks close by), as sums over query
  rows (the Head statistics tab, the head the app opens on, and the heads' roles: model/core/trace/head_roles.py);
- rollout (Abnar & Zuidema 2020) of a self-attention stack: heads averaged, the residual added (0.5 A + 0.5 I),
  layers multiplied. Exact up to ROLLOUT_SIZE positions; longer texts are cut into ROLLOUT_SIZE blocks of
  consecutive positions and each layer's head-averaged attention into block means, A_blocks[I, J] = mean over the
  queries i of I of the attention i puts on the keys of J (rows still sum to 1): the rollout of those block
  matrices approximates the exact one's block means. Exact: O(n³) a layer, 30 s for SmolLM2 at 2,048 tokens.
  The pass keeps each layer's 0.5 A + 0.5 I; the product is made when the Rollout view first asks (one product
  of b x b matrices a layer cost as much as a tenth of a 512-token forward pass on the CPU: the model view, which
  every run draws first, should not wait for it).

A Hugging Face run makes it in its capture, a layer at a time as the forward pass reports each pattern, on the
model's device (`SiteSummariser`; model/core/capture/record.py, RunOptions.summarised), from the probabilities that
also make the layer's attention output (model/core/attention/layer_inputs.py PatternInputs.summary_rows);
`summarise_site` (model/core/trace/summaries.py) makes it from a trace afterwards (from its kept sources, or the toy
models' patterns, captured whole). Each block of query rows comes reduced (model/core/attention/row_reduction.py):
the summariser only adds blocks up.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import on_host
from attention_atlas.model.core.attention.block_means import BlockMeans, block_starts
from attention_atlas.model.core.attention.row_reduction import (
    STATISTICS,
    ReducedRows,
    RowLayout,
    induction_targets,
    reduce_rows,
    role_start,
)

ProbabilityBlock = tuple[np.ndarray, torch.Tensor] | tuple[np.ndarray, torch.Tensor, torch.Tensor]
ROLLOUT_SIZE = 512  # positions (or blocks of positions) a side of the rollout matrix
THUMBNAIL_SIZE = 64  # pixels a side of each head's thumbnail (fewer for a shorter text): a view that draws smaller
# thumbnails shrinks these (viz.thumbnails.thumbnail_grid)


@dataclass(frozen=True)
class SiteSummary:
    """Every layer of one attention site, reduced."""

    thumbnails: np.ndarray  # (layers, heads, t_q, t_k) float32 block means, t = min(size, its length)
    statistics: np.ndarray  # (layers, heads, len(STATISTICS)) float64; NaN where a measure needs one sequence (or,
    # the induction share, the token ids of one that repeats)
    layer_flows: tuple[np.ndarray, ...] | None  # float32 a layer, b = min(ROLLOUT_SIZE, n): each layer's 0.5 A +
    # 0.5 I, rows summing to 1 (the rollout's factors), (b, b), or its lower triangle row by row where nothing lies
    # above it (a causal mask's: half the bytes); None for cross-attention
    rollout_starts: np.ndarray  # (b + 1,) int: block I of the rollout covers positions starts[I]..starts[I+1]-1
    normalisers: np.ndarray | None = None  # (layers, heads, q_len) float32: each row's log2 normaliser in bits, so
    # that p = 2^(score - it) for the keys a row sees (`ReducedRows.normalisers`: a view of one head reads the rows
    # it draws from the kept queries and keys without their softmax, model/inspect/long_head.py); None where the
    # patterns came as probabilities

    @property
    def nbytes(self) -> int:
        """Bytes held, the rollout counted before it is made."""
        kept = self.thumbnails.nbytes + self.statistics.nbytes + self.rollout_starts.nbytes + \
            (0 if self.normalisers is None else self.normalisers.nbytes)
        if self.layer_flows is None:
            return kept
        b = len(self.rollout_starts) - 1
        return kept + sum(flow.nbytes for flow in self.layer_flows) + 4 * b * b

    def row_sums(self, q_len: int, k_len: int) -> np.ndarray:
        """(layers, heads) float64: each head's mean over its q_len queries of a row's sum over the k_len keys, from
        the thumbnails' block means (1 where every row sums to 1; less by the share a sink took: GPT-OSS)."""
        t_q, t_k = self.thumbnails.shape[-2:]
        rows, cols = np.diff(block_starts(q_len, t_q)), np.diff(block_starts(k_len, t_k))  # positions a block
        return np.einsum("lhij,i,j->lh", self.thumbnails.astype(np.float64), rows, cols) / q_len

    @property
    def rollout_is_exact(self) -> bool:
        """Whether every rollout block is one position."""
        return bool((np.diff(self.rollout_starts) == 1).all())

    @cached_property
    def rollout(self) -> np.ndarray | None:
        """(b, b) float32: the layers' flows multiplied, the last layer's on the left; None for cross-attention.
        Made on first use (float32: float64 cost twice as long for no visible digit)."""
        if self.layer_flows is None:
            return None
        b = len(self.rollout_starts) - 1
        lower = _lower_triangle(b, torch.device("cpu")) if any(f.ndim == 1 for f in self.layer_flows) else None
        rolled = _square(self.layer_flows[0], b, lower).clone()  # never the kept flow's own memory
        for flow in self.layer_flows[1:]:
            rolled = _square(flow, b, lower) @ rolled
        return rolled.numpy()


class _Statistics:
    """Per-head sums over query rows of every layer of a site, divided into means at the end: float32 sums of each
    block's rows, kept where the rows are, added up across blocks in float64 on the host (one copy for all layers)."""

    def __init__(self, heads: int, q_len: int, layout: RowLayout) -> None:
        """layout: the site's (positional: queries and keys are one sequence, else no mean distance, previous token,
        itself or induction target; which rows the later queries' shares and the induction share count)."""
        self.q_len, self.heads, self.layout = q_len, heads, layout
        self.layers: list[torch.Tensor] = []  # (blocks, heads, len(STATISTICS)) float32 sums a layer
        self.blocks: list[torch.Tensor] = []  # the next layer's so far: (heads, len(STATISTICS)) a block of rows

    def add(self, sums: torch.Tensor) -> None:
        """A block's (heads, len(STATISTICS)) sums over its rows, on any device."""
        self.blocks.append(sums)

    def end_layer(self) -> None:
        """The blocks added since the last call were one layer's."""
        self.layers.append(torch.stack(self.blocks))
        self.blocks = []

    def result(self) -> np.ndarray:
        """(layers, heads, len(STATISTICS)) means over the queries each counts: every query; the previous token's,
        those that have one; the later queries' shares, those from `from_row` on; the induction share, those with a
        target (NaN where none has)."""
        sums = np.stack([layer.sum(0, dtype=np.float64) for layer in on_host(self.layers)])  # (layers, heads, m)
        means = np.full((len(sums), self.heads, len(STATISTICS)), np.nan)
        q_len, later = self.q_len, self.q_len - self.layout.from_row
        means[..., [0, 2, 5]] = sums[..., [0, 2, 5]] / [q_len, q_len, later]
        if self.layout.positional:
            means[..., [1, 4, 8]] = sums[..., [1, 4, 8]] / q_len
            if q_len > 1:  # (the previous token's from query 1 on)
                means[..., [3, 6]] = sums[..., [3, 6]] / [q_len - 1, q_len - max(self.layout.from_row, 1)]
            targets = 0 if self.layout.targets is None else int((self.layout.targets >= 0).sum())
            if targets:
                means[..., 7] = sums[..., 7] / targets
        return means


class SiteSummariser:
    """A site's summary made one layer at a time, in layer order (as a forward pass reaches them)."""

    def __init__(self, shape: tuple[int, int, int], size: int, self_attention: bool,
                 ids: Sequence[int] | None = None) -> None:
        """shape: (heads, q_len, k_len) of each layer's pattern; size: the thumbnails' side; ids: the token ids of the
        queries (q_len), whose repeats give the induction targets (`induction_targets`; None: not measured)."""
        heads, q_len, k_len = shape
        if ids is not None and len(ids) != q_len:
            raise ValueError(f"{len(ids)} token ids for {q_len} queries")
        self.shape = shape
        self.starts = block_starts(q_len, ROLLOUT_SIZE)
        self.thumbnail = BlockMeans((heads,), q_len, k_len, size)  # sums every layer restarts, on the rows' device
        one_sequence = self_attention and q_len == k_len  # queries and keys: the same positions
        self.averaged = BlockMeans((), q_len, k_len, ROLLOUT_SIZE) if one_sequence else None  # the heads' sum
        self.layout = RowLayout(self.thumbnail.col_starts.astype(np.int32),
                                None if self.averaged is None else self.averaged.col_starts.astype(np.int32),
                                one_sequence, role_start(q_len),
                                induction_targets(ids) if one_sequence and ids is not None else None
                                )  # how each block of rows is reduced for it
        self.statistics = _Statistics(heads, q_len, self.layout)  # every layer's
        self.thumbnails: list[torch.Tensor] = []  # (heads, t_q, t_k) float32 a layer, where the rows are
        self.flows: list[torch.Tensor] = []  # each layer's (b, b), on the rows' device
        self.causal_shaped: list[bool] = []  # each layer's: no block saw ahead (`ReducedRows.sees_ahead`)
        self.normalisers: list[torch.Tensor | None] = []  # each layer's (heads, q_len), where every block had them

    def add_layer(self, blocks: Iterator[ReducedRows]) -> None:
        """The next layer's pattern as blocks of consecutive query rows reduced by `self.layout`, covering every
        query row once, in order."""
        thumbnail, summed = self.thumbnail, self.averaged
        thumbnail.restart()
        if summed is not None:
            summed.restart()
        causal_shaped = True  # no block saw ahead
        norms, every = None, True  # the layer's rows' normalisers; whether every block came with its rows'
        for reduced in blocks:
            every = every and reduced.normalisers is not None
            if every:
                norms = reduced.normalisers.new_empty(self.shape[:2]) if norms is None else norms
                norms[:, reduced.start : reduced.start + reduced.normalisers.shape[1]] = reduced.normalisers
            thumbnail.add_column_sums(reduced.start, reduced.thumbnail)
            self.statistics.add(reduced.statistics)
            if summed is not None:
                summed.add_column_sums(reduced.start, reduced.rollout)
                causal_shaped = causal_shaped and not reduced.sees_ahead
        self.statistics.end_layer()
        self.normalisers.append(norms if every else None)
        self.thumbnails.append(thumbnail.means())
        if summed is not None:
            self.flows.append(_flow(summed, self.shape[0]))
            self.causal_shaped.append(causal_shaped)

    def add_probabilities(self, blocks: Iterator[ProbabilityBlock]) -> None:
        """The next layer's pattern as (query positions, float32 probabilities (heads, rows, width <= k_len), the
        keys after width 0[, the rows' entropy in bits (heads, rows)]) blocks of consecutive rows covering every
        query row once, in order."""
        self.add_layer(reduce_rows(int(positions[0]), p, self.layout, *entropy) for positions, p, *entropy in blocks)

    def _kept_flows(self) -> list[torch.Tensor]:
        """Each layer's flow as SiteSummary keeps it: a flow with nothing above its diagonal (a causal mask's) as its
        lower triangle alone, half the bytes. The check for it (about 0.5 ms at b = 512 on a 2-core CPU) is made only
        where no block saw ahead (a bidirectional layer's blocks tell, from the mask), for every layer at once at the
        end: a GPU waits for it once, not once a layer."""
        checked = [i for i, causal in enumerate(self.causal_shaped) if causal]
        if not checked:
            return self.flows
        above = on_host([torch.stack([torch.triu(self.flows[i], 1).any() for i in checked])])[0]  # (checked,)
        lower = _lower_triangle(len(self.flows[0]), self.flows[0].device)
        triangles = {i for i, any_above in zip(checked, above, strict=True) if not any_above}
        return [flow.view(-1)[lower] if i in triangles else flow for i, flow in enumerate(self.flows)]

    def result(self) -> SiteSummary:
        """The summary on the host: what the layers left on the device (thumbnails, statistics, flows), a copy each."""
        flows = on_host(self._kept_flows()) if self.flows else None
        norms = None if any(n is None for n in self.normalisers) else np.stack(on_host(self.normalisers))
        return SiteSummary(np.stack(on_host(self.thumbnails)), self.statistics.result(), flows, self.starts, norms)


def summarise(layers: Iterator[Iterator[ProbabilityBlock]], shape: tuple[int, int, int], size: int,
              self_attention: bool, ids: Sequence[int] | None = None) -> SiteSummary:
    """Reduce every layer of a site (`SiteSummariser`), given as an iterator of each layer's blocks."""
    summariser = SiteSummariser(shape, size, self_attention, ids)
    for blocks in layers:
        summariser.add_probabilities(blocks)
    return summariser.result()


def _flow(summed: BlockMeans, heads: int) -> torch.Tensor:
    """A layer's factor of the rollout from the block sums of its heads' summed attention: A (the heads' mean,
    summed over a block's keys, averaged over its queries: rows sum to 1), 0.5 A + 0.5 I, rows renormalised against
    rounding: (A + I) / its row sums, made in one pass over the sums (and one to sum them); (b, b) float32, where the
    sums are."""
    scale = summed.row_counts * heads  # (b,): what a row of sums is divided by for A (where the sums are)
    total = summed.sums.sum(-1) / scale + 1.0  # (b,): the row sums of A + I
    a = summed.sums * (1.0 / (scale * total))[:, None]  # (b, b)
    a.diagonal().add_(1.0 / total)
    return a


def _square(flow: np.ndarray, b: int, lower: torch.Tensor | None) -> torch.Tensor:
    """A layer's flow as its (b, b) matrix (a lower triangle kept alone, at the flat indices `lower`: zeros above
    it)."""
    if flow.ndim == 2:
        return torch.from_numpy(flow)
    square = torch.zeros(b, b)
    square.view(-1)[lower] = torch.from_numpy(flow)
    return square


def _lower_triangle(b: int, device: torch.device) -> torch.Tensor:
    """(b (b + 1) / 2,) the flat indices of a (b, b) matrix's lower triangle, row by row."""
    rows, cols = torch.tril_indices(b, b, device=device)
    return rows * b + cols
