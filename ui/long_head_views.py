"""The Attention page's One head view drawn so a long text reads (model/inspect/long_head.py, viz/long_views.py): the
whole head max-pooled, where a click opens that region in the full-resolution window below; the head by distance
back; and the head with its sink columns apart, each part on its own colour scale. The head's overview is computed
once per trace and head, a block of rows at a time."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.inspect.long_head import HeadOverview, head_overview, sink_columns
from attention_atlas.plot.long_head import DISTANCE_ROWS, distance_view, pooled_view, sink_view
from attention_atlas.ui.attention_choice import Choice
from attention_atlas.ui.colour_scale import choose_scale
from attention_atlas.ui.downloads import downloads, figure_label
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.heatmap import WINDOW
from attention_atlas.viz.long_views import zoom_centres

DRAWS = {"matrix": "the matrix", "sink": "sinks apart", "distance": "by distance back"}  # value (and link) -> label


def choose_draw(c: Choice) -> str:
    """How the head is drawn (DRAWS); by distance only where queries and keys are one sequence."""
    one_sequence = not Site.of(c.site).is_cross and len(c.rows) == len(c.cols)  # queries and keys: one sequence
    draws = {k: v for k, v in DRAWS.items() if k != "distance" or one_sequence}
    if st.session_state.get("attention_draw") not in draws:
        st.session_state["attention_draw"] = "matrix"
    return st.segmented_control("Draw the head as", list(draws), key="attention_draw", format_func=draws.get,
                                help="A long text's head: its sink apart on its own colour scale, or each query's "
                                     "attention by how far back it looks.") or "matrix"


def overview_of(c: Choice) -> HeadOverview:
    return per_trace(c.trace, ("head overview", c.site, c.layer, c.head),
                     lambda: head_overview(c.trace, c.site, c.layer, c.head))


def show_pooled(c: Choice, window: tuple[int, int, int, int]) -> None:
    """The whole head, each block of cells its largest weight, the window drawn below outlined; a click opens the
    region around it there."""
    o = overview_of(c)
    figure = pooled_view(c, o, window)
    st.plotly_chart(figure, key="attention_pooled", selection_mode="points", alt=figure_label(figure, csv=False),
                    on_select=partial(open_clicked_region, zoom_centres(o.row_starts, o.col_starts), len(c.rows),
                                      len(c.cols)))
    downloads(figure, f"{c.name}.{c.head}.pooled", "attention_pooled_files")


def open_clicked_region(centres: np.ndarray, n_q: int, n_k: int) -> None:
    """A click on the pooled head (its marker grid, trace 1; `centres` (markers, 2) the query row and key column each
    marker stands for): the window's first row and column put so the clicked cell is in the middle, the keys untied
    from the rows where they differ. The chart's on_select callback."""
    event = st.session_state.get("attention_pooled")
    points = [p for p in event.selection.points if p.get("curve_number") == 1] if event else []
    if not points:
        return
    row, col = (int(v) for v in centres[int(points[0]["point_index"])])
    first_row = min(max(0, row - WINDOW // 2), max(0, n_q - WINDOW))
    first_col = min(max(0, col - WINDOW // 2), max(0, n_k - WINDOW))
    st.session_state.update(attention_window_row=first_row, attention_window_col=first_col,
                            attention_window_diagonal=first_row == first_col)


def show_distance(c: Choice) -> None:
    o = overview_of(c)
    figure, block = distance_view(c, o)
    st.caption(f"Each query's weight on the key d positions back, d = 0 … {o.by_distance.shape[1] - 1}: a "
               "previous-token head is one bright column at 1, a local head a band near 0." +
               (f" Each row is the mean of a block of up to {block} queries (every query is a row up to "
                f"{DISTANCE_ROWS})." if block > 1 else ""))
    st.plotly_chart(figure, key="attention_distance", alt=figure_label(figure, csv=False))
    downloads(figure, f"{c.name}.{c.head}.distance", "attention_distance_files")


def show_sink_apart(c: Choice) -> None:
    """The rows drawn with the head's sink columns (over the whole text) on their own colour scale beside the rest."""
    o = overview_of(c)
    sinks = sink_columns(o.column_means)
    if not len(sinks):
        st.info(f"No key takes {c.where} · head {c.head} a large share of every row: no sink to draw apart "
                "(a key is a sink here where the rows give it at least 30% of their attention on average).",
                icon=":material/info:")
        return
    rows = c.trace.head_pattern(c.site, c.layer, c.head, c.rows)  # (rows drawn, k_len): whole rows, read once
    drawn = sink_view(c, o, choose_scale(rows[:, np.setdiff1d(c.cols, sinks)], "attention_sink_scale"), rows)
    names = ", ".join(f"#{k} ‘{c.trace.key_tokens(c.site)[k]}’" for k in drawn.sinks)
    st.caption(f"The sink{'s' if len(drawn.sinks) > 1 else ''} {names} took {drawn.whole_share:.1%} of this head's "
               f"attention over every query ({drawn.drawn_share:.1%} over the rows drawn); the other keys are drawn "
               "on their own scale. " + (drawn.scale.note or ""))
    st.plotly_chart(drawn.figure, key="attention_sink_apart", alt=figure_label(drawn.figure, csv=False))
    downloads(drawn.figure, f"{c.name}.{c.head}.sink-apart", "attention_sink_apart_files")
