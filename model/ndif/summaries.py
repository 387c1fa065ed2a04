"""A site's summary from the sums NDIF made of each layer (model/ndif/remote_summary.py): the same SiteSummariser a
local run's capture feeds (model/core/attention/summary.py), given each layer as blocks of query rows whose sums it
adds up, so that the summary is the local run's, made the same way from the same sums.

The sums come per block of the summary's own layout: a thumbnail's (t, t) block sums a head, a rollout's (b, b) block
sums of the heads' total. Every thumbnail block's first position is a rollout block's (both cut n positions by
block_starts: (i n) // 64 = (8 i n) // 512), so each thumbnail row block is handed over as one block of rows: its sums
on its first row, each rollout row block's sums on that block's first row, the other rows 0 (a block's rows are added
up into their blocks, so where within its block a sum sits does not change it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from attention_atlas.model.core.attention.row_reduction import ReducedRows, RowLayout
from attention_atlas.model.core.attention.summary import THUMBNAIL_SIZE, SiteSummariser, SiteSummary

Reduced = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # what remote_summary.reduce_layer returns for a layer


def summariser(heads: int, ids: Sequence[int]) -> SiteSummariser:
    """The summariser of a decoder's self-attention site over `ids`, as a local run's capture makes it."""
    return SiteSummariser((heads, len(ids), len(ids)), THUMBNAIL_SIZE, True, ids)


def wire_layout(layout: RowLayout) -> dict[str, Any]:
    """`layout` as plain data for the request (remote_summary.Layout)."""
    if layout.rollout_starts is None or not layout.positional:
        raise ValueError("a decoder's self-attention layout has a rollout and is positional")
    return {"thumbnail": layout.thumbnail_starts.tolist(), "rollout": layout.rollout_starts.tolist(),
            "from_row": int(layout.from_row), "targets": None if layout.targets is None else layout.targets.tolist()}


def site_summary(made: SiteSummariser, layers: Sequence[Reduced]) -> SiteSummary:
    """The summary of every layer, from the sums NDIF made of each, in layer order."""
    for reduced in layers:
        made.add_layer(_blocks(made.layout, *reduced))
    return made.result()


def _blocks(layout: RowLayout, thumbnail: torch.Tensor, statistics: torch.Tensor, rollout: torch.Tensor
            ) -> Iterator[ReducedRows]:
    """One layer's sums (thumbnail (heads, t (t + 1) / 2) and rollout (b (b + 1) / 2,) lower triangles, statistics
    (heads, m)) as a block of rows a thumbnail row block."""
    t_starts, r_starts = layout.thumbnail_starts, layout.rollout_starts
    t, b = len(t_starts) - 1, len(r_starts) - 1
    heads = len(thumbnail)
    thumbnails = _square(thumbnail, t)  # (heads, t, t)
    flows = _square(rollout[None], b)[0]  # (b, b)
    r_first = torch.from_numpy(r_starts[:-1].astype("int64"))  # (b,) each rollout row block's first position
    for block in range(t):
        start, stop = int(t_starts[block]), int(t_starts[block + 1])
        rows = stop - start
        thumb = thumbnail.new_zeros(heads, rows, t)
        thumb[:, 0] = thumbnails[:, block]
        inside = torch.nonzero((r_first >= start) & (r_first < stop))[:, 0]  # rollout row blocks in this one
        roll = flows.new_zeros(rows, b)
        roll[r_first[inside] - start] = flows[inside]
        sums = statistics if block == 0 else torch.zeros_like(statistics)
        yield ReducedRows(start, sums, thumb, roll, False)


def _square(lower: torch.Tensor, size: int) -> torch.Tensor:
    """(lead, size (size + 1) / 2) lower triangles, row by row -> (lead, size, size), 0 above the diagonal."""
    rows, cols = torch.tril_indices(size, size)
    square = lower.new_zeros(len(lower), size, size)
    square[:, rows, cols] = lower
    return square
