"""One head of a long text, read so a person can see it: the whole matrix max-pooled into blocks (a previous-token
head's 1-pixel diagonal stays lit in its block: a mean would fade it), each query's attention by distance back
(p[i, i - d] for d = 0 .. reach: a previous-token head is one sharp column, a local head a band, at any length), and
the columns that act as sinks (keys most rows give much of their attention: the first token, most often).

`head_overview` reads the head a block of query rows at a time (ROWS_AT_ONCE), computing only that head from the
trace's kept queries and keys: a 32,768-token head is never held whole; where the run kept each row's normaliser, from
its scores alone (model/inspect/head_scores.py: no softmax over every cell)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.head_scores import scored_overview

ROWS_AT_ONCE = 512  # query rows of the head computed at once (512 x 32,768 float32: 64 MB)
POOLED = 256  # blocks a side of the max-pooled matrix (a 1280 x 720 screen shows about 600 px of it)
REACH = 64  # distances back the distance view shows (0 .. REACH)
SINK_SHARE = 0.3  # a key column to which the rows drawn give at least this mean share is drawn apart as a sink
MOST_SINKS = 4  # at most this many sink columns, the largest first


@dataclass(frozen=True)
class HeadOverview:
    """A head's whole matrix, reduced. Shapes: (bq, bk), (bq + 1,), (bk + 1,), (q_len, reach + 1), (k_len,)."""

    pooled: np.ndarray  # (bq, bk) float32: the largest weight of each block of cells
    row_starts: np.ndarray  # (bq + 1,) int: block I covers query rows row_starts[I] .. row_starts[I + 1] - 1
    col_starts: np.ndarray  # (bk + 1,) int: the same for the key columns
    by_distance: np.ndarray  # (q_len, reach + 1) float32: p[i, i - d]; NaN where i - d < 0 (no such key)
    column_means: np.ndarray  # (k_len,) float32: each key's mean weight over every query row

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.pooled, self.row_starts, self.col_starts, self.by_distance,
                                      self.column_means))


def head_overview(trace: Trace, site: str, layer: int, head: int, pooled: int | None = None,
                  reach: int = REACH) -> HeadOverview:
    """The head reduced into `pooled` blocks a side (None: POOLED): from its scores and the run's row normalisers
    where the trace has them (model/inspect/head_scores.py: the column means then exact where a sink can be, each
    other key its thumbnail block's mean), else from its probabilities, a block of ROWS_AT_ONCE query rows at a time.
    The distance view is defined where queries and keys are one sequence (self-attention); else it is all NaN."""
    pooled = POOLED if pooled is None else pooled
    q_len, k_len = len(trace.query_tokens(site)), len(trace.key_tokens(site))
    row_starts, col_starts = block_starts(q_len, pooled), block_starts(k_len, pooled)
    one_sequence = not Site.of(site).is_cross and q_len == k_len
    scored = scored_overview(trace.pattern_source(site, layer), trace.summaries.get(site), layer, head, row_starts,
                             col_starts, reach, one_sequence, SINK_SHARE)
    if scored is not None:
        return HeadOverview(scored[0], row_starts, col_starts, scored[1], scored[2])
    blocks = np.zeros((len(row_starts) - 1, len(col_starts) - 1), np.float32)
    by_distance = np.full((q_len, reach + 1), np.nan, np.float32)
    column_sums = np.zeros(k_len, np.float64)
    distances = np.arange(reach + 1)
    row_block = np.searchsorted(row_starts, np.arange(q_len), side="right") - 1  # (q_len,) each row's block
    for start in range(0, q_len, ROWS_AT_ONCE):
        rows = np.arange(start, min(q_len, start + ROWS_AT_ONCE))
        p = np.nan_to_num(trace.head_pattern(site, layer, head, rows).astype(np.float32))  # (rows, k_len)
        column_sums += p.sum(0, dtype=np.float64)
        pooled_cols = np.maximum.reduceat(p, col_starts[:-1], axis=1)  # (rows, bk)
        np.maximum.at(blocks, row_block[rows], pooled_cols)
        if one_sequence:
            keys = rows[:, None] - distances[None, :]  # (rows, reach + 1)
            seen = keys >= 0
            by_distance[rows] = np.where(seen, np.take_along_axis(p, np.maximum(keys, 0), axis=1), np.nan)
    return HeadOverview(blocks, row_starts, col_starts, by_distance, (column_sums / q_len).astype(np.float32))


def sink_columns(column_means: np.ndarray) -> np.ndarray:
    """The key positions drawn apart as sinks: those with a mean share of at least SINK_SHARE, the largest first,
    at most MOST_SINKS, in position order."""
    heavy = np.flatnonzero(column_means >= SINK_SHARE)
    return np.sort(heavy[np.argsort(-column_means[heavy], kind="stable")][:MOST_SINKS])


def pooled_rows(values: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """values (n, m) with at most `most` rows: the mean of each block of rows (NaN ignored), and the blocks' starts
    (blocks + 1,); every row its own block where n <= most."""
    starts = block_starts(len(values), most)
    with np.errstate(invalid="ignore"):
        sums = np.add.reduceat(np.nan_to_num(values), starts[:-1], axis=0)
        counts = np.add.reduceat((~np.isnan(values)).astype(np.float32), starts[:-1], axis=0)
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).astype(np.float32), starts
