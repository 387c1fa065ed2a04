"""One head of a long text drawn so it reads, as the Attention page's One head view draws it: the whole head
max-pooled, the head by distance back, and the head with its sink columns apart (model/inspect/long_head.py reduces
the head a block of rows at a time; viz/long_views.py draws). The page and the notebook draw through these:

    trace = model.run(long_text)
    aa.plot.by_distance(trace, "decoder.16.attn.hook_pattern", head=0)   # a previous-token head: a column at 1
    aa.plot.sink_apart(trace, "decoder.18.attn.hook_pattern", head=8)
    aa.plot.pooled(trace, "decoder.16.attn.hook_pattern", head=0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.long_head import HeadOverview, head_overview, pooled_rows, sink_columns
from attention_atlas.plot.attention import HeadChoice, choice
from attention_atlas.viz.colour_range import CLIPPED, LOG, WHOLE, Scale, opening_scale, scaled
from attention_atlas.viz.long_views import distance_figure, pooled_figure, sink_apart_figure

DISTANCE_ROWS = 1024  # query rows the distance view draws at most (longer texts: the mean of blocks of rows)
SCALES = {"auto": None, "whole": WHOLE, "log": LOG, "clipped": CLIPPED}  # sink_apart(scale=…)


@dataclass(frozen=True)
class SinkApart:
    """A head's rows with its sink columns apart: the figure, the scale of the other keys, and what the sinks took."""

    figure: go.Figure
    scale: Scale
    sinks: np.ndarray  # (s,) the sink key positions
    whole_share: float  # the sinks' mean share over every query row
    drawn_share: float  # and over the rows drawn


def pooled_view(c: HeadChoice, overview: HeadOverview, window: tuple[int, int, int, int] | None) -> go.Figure:
    """The whole head, each block of cells its largest weight; `window` (first row, rows, first column, columns)
    outlined."""
    return pooled_figure(overview.pooled, overview.row_starts, overview.col_starts,
                         f"{c.where} · head {c.head}: the whole head, max-pooled (click to open a region below)",
                         window)


def distance_view(c: HeadChoice, overview: HeadOverview) -> tuple[go.Figure, int]:
    """The head by distance back, and how many queries a row of it averages (1: every query a row)."""
    values, starts = pooled_rows(overview.by_distance, DISTANCE_ROWS)
    title = f"{c.where} · head {c.head} by distance back"
    return distance_figure(values, starts, c.trace.query_tokens(c.site), title), int(np.diff(starts).max())


def sink_view(c: HeadChoice, overview: HeadOverview, choice_of_scale: str | None = None,
              rows: np.ndarray | None = None) -> SinkApart | None:
    """The rows `c` draws with the head's sink columns (found over the whole text) on their own colour scale beside
    the other keys drawn, on the scale `choice_of_scale` (WHOLE, LOG, CLIPPED; None: the opening one); None where no
    key is a sink. rows: the head's rows drawn, whole (rows drawn, k_len), where the caller read them already."""
    sinks = sink_columns(overview.column_means)
    if not len(sinks):
        return None
    rows = c.trace.head_pattern(c.site, c.layer, c.head, c.rows) if rows is None else rows
    rest_keys = np.setdiff1d(c.cols, sinks)
    rest = rows[:, rest_keys]
    shown = scaled(rest, "weight", choice_of_scale or opening_scale(rest))
    queries = c.trace.query_tokens(c.site)
    figure = sink_apart_figure(rows[:, sinks], shown.values, shown.zrange, [queries[i] for i in c.rows],
                               c.rows.tolist(), c.trace.key_tokens(c.site), sinks.tolist(), rest_keys.tolist(),
                               f"{c.where} · head {c.head}: the sink apart", shown.value_name)
    return SinkApart(figure, shown, sinks, float(overview.column_means[sinks].sum()),
                     float(rows[:, sinks].sum(1).mean()))


def pooled(trace: Trace, name: str, head: int) -> go.Figure:
    """The whole of one head max-pooled into blocks of cells (at most 256 a side), as drawn above a long text's
    window. name: an attention pattern's hook name ("decoder.16.attn.hook_pattern")."""
    c = choice(trace, name, head)
    return pooled_view(c, head_overview(trace, c.site, c.layer, c.head), None)


def by_distance(trace: Trace, name: str, head: int) -> go.Figure:
    """One head by distance back: each query's weight on the key 0 … 64 positions before it (self-attention only);
    over 1,024 queries, each row is the mean of a block of queries."""
    c = choice(trace, name, head)
    if Site.of(c.site).is_cross or len(c.rows) != len(c.cols):
        raise UserError("by_distance draws a self-attention head: its queries and keys are one sequence")
    return distance_view(c, head_overview(trace, c.site, c.layer, c.head))[0]


def sink_apart(trace: Trace, name: str, head: int, *, scale: str = "auto", first_row: int | None = None
               ) -> go.Figure:
    """One head's rows (a long text's 512-row window from first_row, as `head` draws it) with its sink columns
    (keys the rows give at least 30% of their attention on average, over the whole text) in a strip of their own
    colour scale, the other keys on theirs: scale "auto", "whole", "log" or "clipped". UserError where no key is a
    sink."""
    if scale not in SCALES:
        raise UserError(f"scale is one of {', '.join(map(repr, SCALES))}, not {scale!r}")
    c = choice(trace, name, head)
    drawn = sink_view(c.windowed(first_row, None), head_overview(trace, c.site, c.layer, c.head), SCALES[scale])
    if drawn is None:
        raise UserError(f"no key takes head {head} of {name} a large share of every row: no sink to draw apart")
    return drawn.figure
