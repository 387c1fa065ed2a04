"""One head of a long text reduced from its scores alone: the run's summary kept each row's log2 normaliser
(model/core/attention/summary.py `SiteSummary.normalisers`), so a probability is 2^(score - normaliser) and a view
needs no softmax over the whole row. The largest weight of a block of cells is 2 to its largest score less the row's
normaliser; the weights a few keys back, and the weights of a few key columns, the same of those cells only. So the
head's whole matrix costs its Q Kᵀ and one pass of maxima (about a second at 32,768 tokens on 2 cores; the softmax of
every cell took 8 to 14 s more).

`scored_overview` makes long_head.py's HeadOverview so, where the trace kept the layer's queries and keys, its summary
has normalisers for every row of the head, and the scores are Q Kᵀ x scale alone (no position bias, no soft cap);
else it returns None and long_head.py reads the head's probabilities. Equal to those to float32 rounding
(tests/model/test_head_scores.py)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.arrays import as_tensor
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.sinks import LOG2_E
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.attention.summary import SiteSummary

ROWS_AT_ONCE = 512  # query rows scored at once, in whole blocks of the pooled view (512 x 32,768 float32: 64 MB)


def scored_overview(source: PatternSource | None, summary: SiteSummary | None, layer: int, head: int,
                    row_starts: np.ndarray, col_starts: np.ndarray, reach: int, one_sequence: bool, sink_share: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(pooled (bq, bk) float32, the largest weight of each block of cells; by_distance (q_len, reach + 1) float32,
    p[i, i - d], NaN where i - d < 0 (all NaN unless `one_sequence`); column_means (k_len,) float32, each key's mean
    weight over every query, exact for the keys of every thumbnail column block whose keys take at least
    `sink_share` of the attention together (where a sink can be), elsewhere their block's mean), or None (module
    docstring)."""
    if source is None or summary is None or summary.normalisers is None or source.bias is not None \
            or source.softcap is not None or bool(np.isnan(summary.normalisers[layer, head]).any()):
        return None
    q_len, k_len = source.shape[1:]
    norms = torch.from_numpy(summary.normalisers[layer, head])  # (q_len,) bits
    query = as_tensor(source.query[[head]], torch.device("cpu"))[0] * (source.scale * LOG2_E)  # (q_len, d) bits
    key = as_tensor(source.key[[head // (source.shape[0] // len(source.key))]], torch.device("cpu"))[0]  # (k_len, d)
    kernel = native.attention_rows()
    by_key = key.T.contiguous()  # (d, k_len)
    product = (lambda rows, end: native.scores_of(kernel, query[rows], by_key, end)) if kernel and kernel.scores else \
        (lambda rows, end: query[rows] @ by_key[:, :end])  # (rows, end): the native kernel's product tile, or a BLAS
    candidates, means = _sink_candidates(summary.thumbnails[layer, head], q_len, k_len, sink_share)
    pooled = torch.zeros(len(row_starts) - 1, len(col_starts) - 1)
    by_distance = torch.full((q_len, reach + 1), float("nan"))
    sums = torch.zeros(len(candidates), dtype=torch.float64)
    distances = torch.arange(reach + 1)
    band = _offset_band(source.allowed)
    each = max(1, ROWS_AT_ONCE // int(np.diff(row_starts).max()))  # whole row blocks a chunk of rows
    for first in range(0, len(row_starts) - 1, each):
        blocks = row_starts[first : first + each + 1]  # the chunk's row blocks' starts, then its end
        rows = slice(int(blocks[0]), int(blocks[-1]))
        end, hide = _masking(source.allowed, rows, band)  # keys from `end` on hidden from every row: not scored
        bits = hide(product(rows, end)).sub_(norms[rows, None])  # (rows, end): log2 p, -inf where hidden
        block_max = torch.stack([bits[a - rows.start : b - rows.start].amax(0) for a, b in pairwise(blocks)])
        scored = int(np.searchsorted(col_starts[:-1], end))  # the column blocks that hold a key scored
        top = np.maximum.reduceat(block_max.numpy(), col_starts[:scored], axis=1)  # (row blocks, scored)
        pooled[first : first + len(blocks) - 1, :scored] = torch.exp2(torch.from_numpy(top))
        if one_sequence:
            keys = torch.arange(rows.start, rows.stop)[:, None] - distances  # (rows, reach + 1)
            behind = torch.where(keys < end, torch.exp2(bits.gather(1, keys.clamp(0, end - 1))), 0.0)  # (keys not
            by_distance[rows] = torch.where(keys >= 0, behind, float("nan"))  # scored: hidden from every row)
        within = candidates[candidates < end]
        sums[: len(within)] += torch.exp2(bits[:, within]).sum(0, dtype=torch.float64)
    means[candidates] = (sums / q_len).float()
    return pooled.numpy(), by_distance.numpy(), means.numpy()


def _sink_candidates(thumbnail: np.ndarray, q_len: int, k_len: int, share: float
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the keys of every thumbnail column block whose keys' mean weights add up to `share` or more, (k_len,) each
    key's block's mean weight): from a head's thumbnail (t_q, t_k) of block means, the blocks cut as the summary cuts
    them (`block_starts`). A key whose own mean weight is `share` or more is among them."""
    t_q, t_k = thumbnail.shape
    rows, cols = np.diff(block_starts(q_len, t_q)), np.diff(block_starts(k_len, t_k))
    totals = (thumbnail.astype(np.float64) * rows[:, None]).sum(0) * cols / q_len  # (t_k,): the keys' means, summed
    chosen = np.flatnonzero(totals >= share - 1e-4)  # (float32 sums: a margin far above their rounding)
    starts = block_starts(k_len, t_k)
    keys = np.concatenate([np.arange(starts[b], starts[b + 1]) for b in chosen]) if len(chosen) else np.zeros(0, int)
    return torch.from_numpy(keys.astype(np.int64)), torch.from_numpy(np.repeat(totals / cols, cols).astype(np.float32))


def _offset_band(allowed: np.ndarray) -> tuple[int, int] | None:
    """(least, greatest) i - k of the pairs a mask lets query i see key k, where those are every offset between (a
    causal mask, a bidirectional one, a sliding window: kept as its diagonals, model/core/trace/kept_masks.py);
    else None."""
    if allowed.strides[0] != -allowed.strides[1]:
        return None
    k_len = allowed.shape[1]
    offsets = np.flatnonzero(np.concatenate([allowed[0, ::-1], allowed[1:, 0]])) - (k_len - 1)  # by i - k
    if not len(offsets) or offsets[-1] - offsets[0] + 1 != len(offsets):
        return None
    return int(offsets[0]), int(offsets[-1])


def _masking(allowed: np.ndarray, rows: slice, band: tuple[int, int] | None
             ) -> tuple[int, Callable[[torch.Tensor], torch.Tensor]]:
    """(end, hide): the keys from `end` on are hidden from every one of `rows`, and hide(scores (rows, end)) sets the
    scores of the others that a row may not see to -inf, in place. Where the mask is an offset band (`_offset_band`),
    from the offsets, only the columns some row may not see compared; else from the mask's rows."""
    if band is None:
        mask = np.asarray(allowed[rows])  # (rows, k_len)
        seen = np.flatnonzero(mask.any(0))
        end = int(seen[-1]) + 1 if len(seen) else 1
        hidden = ~torch.from_numpy(np.ascontiguousarray(mask[:, :end]))
        return end, lambda scores: scores.masked_fill_(hidden, float("-inf"))
    least, most = band
    end = max(1, min(allowed.shape[1], rows.stop - least))
    queries = torch.arange(rows.start, rows.stop)[:, None]  # (rows, 1)

    def hide(scores: torch.Tensor) -> torch.Tensor:
        ahead = max(0, rows.start - least + 1)  # keys from here on: some row's i - k below the least offset
        if ahead < end:
            keys = torch.arange(ahead, end)
            scores[:, ahead:].masked_fill_(queries - keys < least, float("-inf"))
        behind = min(end, max(0, rows.stop - 1 - most))  # keys before: some row's i - k above the greatest
        if behind > 0:
            scores[:, :behind].masked_fill_(queries - torch.arange(behind) > most, float("-inf"))
        return scores

    return end, hide
