"""Attention: the whole model at a glance (the view it opens on: click a head to open it), one head, every
head of a layer, the token line view, head statistics, rollout, and one head compared across two runs
(ui/compare.py), with display options and downloads.
Only the open tab is computed and sent."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.plot.attention import model_view_figure, model_view_grid, shown_positions, thumbnail_size
from attention_atlas.ui import url_state
from attention_atlas.ui.attention_choice import Choice
from attention_atlas.ui.compare import show_compare
from attention_atlas.ui.downloads import constant, downloads, figure_label, whole_csv
from attention_atlas.ui.long_head_views import choose_draw, show_distance, show_pooled, show_sink_apart
from attention_atlas.ui.page import current_trace, show_open_tab
from attention_atlas.ui.pickers import choose_head, keep_valid, open_clicked_head
from attention_atlas.ui.role_views import roles_section
from attention_atlas.ui.site_summary import site_summary
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.ui.why_here import clicked_cell, why_here
from attention_atlas.viz.head_lines import DEFAULT_THRESHOLD
from attention_atlas.viz.heatmap import (
    COLOR_SCALES,
    VALUES_UP_TO,
    WINDOW,
    attention_heatmap,
    block_labels,
    layer_head_heatmap,
    sink_bars,
)
from attention_atlas.viz.score_parts import clickable_cells
from attention_atlas.viz.thumbnails import masked_pixels, thumbnail_figure, thumbnail_grid
from attention_atlas.viz.tokens import visible_token

VIEWS = ["Model view", "One head", "All heads of this layer", "Token lines", "Head statistics", "Rollout", "Compare"]
LAYER_THUMBNAIL = 96  # pixels per head when showing one layer
SINK = "to the sink"  # the head statistic of a model with sinks: the mean share of a row its sink took
CLICKABLE_CELLS = 64 * 64  # a head drawn with at most this many cells takes a click on a cell ("Why here?")
SINK_SEEN = 1e-4  # a head's rows short of 1 by more than this on average: more than float32 rounding


def model_view_image(trace: Trace, site: str, size: int, hide_special: bool) -> np.ndarray:
    """The thumbnail grid of a site (`model_view_grid`), computed once per trace (kept with it in the cache)."""
    return per_trace(trace, ("model view", site, size, hide_special),
                     lambda: model_view_grid(trace, site, size, hide_special, site_summary))


def _window_start(label: str, last: int, default: int, key: str) -> int:
    """A slider over the first position of a window (0..last); a remembered value that no longer fits (a
    shorter text) is brought back into range."""
    st.session_state[key] = min(max(0, st.session_state.get(key, default)), last)
    return st.slider(label, 0, last, key=key)


def window(c: Choice) -> Choice:
    """Long texts: a window of up to WINDOW x WINDOW cells at full resolution. The rows are chosen with a
    slider; for self-attention the keys follow them (the block on the diagonal, where a causal mask leaves
    something to see) unless the person unties them."""
    n_q, n_k = len(c.rows), len(c.cols)
    if max(n_q, n_k) <= WINDOW:
        return c
    w_q, w_k = min(WINDOW, n_q), min(WINDOW, n_k)
    q_col, k_col = st.columns(2)
    with q_col:
        row = _window_start("First query row", n_q - w_q, n_q - w_q, "attention_window_row")
    with k_col:
        square = n_q == n_k
        follow = square and st.toggle("Keys follow the rows (the diagonal block)", value=True,
                                      key="attention_window_diagonal")
        col = row if follow else _window_start("First key column", n_k - w_k, 0, "attention_window_col")
    url_state.write(row=row, col=col, diagonal=follow if square else None)
    shown = c.windowed(row, col)
    st.caption(f"Drawn: query rows #{shown.rows[0]}–#{shown.rows[-1]} × key columns #{shown.cols[0]}–"
               f"#{shown.cols[-1]}, {w_q} × {w_k} of {n_q:,} × {n_k:,} cells (more would be too slow to draw). "
               "The model view, the head statistics and the rollout cover the whole text.")
    if shown.masked.all():
        st.warning("Every cell of this window is masked: its keys all come after its queries. Move the key columns "
                   "left, or let the keys follow the rows.", icon=":material/visibility_off:")
    return shown


def one_head(c: Choice) -> None:
    if not c.has_sinks:
        st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
    else:  # the head's sink logit s_h: one more column of the softmax, dropped after
        st.latex(r"A=\mathrm{softmax}\!\left(\Big[\frac{QK^\top}{\sqrt{d_k}}+M,\ s_h\Big]\right)_{:,\,1..n},"
                 r"\qquad\mathrm{Attention}(Q,K,V)=AV")
    st.caption(f"Row = a query token, column = a key token. {c.rows_note} "
               "M is 0 where the mask lets a query see a key and −∞ where it does not (hatched cells).")
    draw = choose_draw(c)
    url_state.write(draw=None if draw == "matrix" else draw)
    if draw == "distance":
        show_distance(c)
    else:
        shown = window(c)
        if max(len(c.rows), len(c.cols)) > WINDOW:  # the whole head above the window it draws
            show_pooled(c, (int(shown.rows[0]), len(shown.rows), int(shown.cols[0]), len(shown.cols)))
        if draw == "sink":
            show_sink_apart(shown)
        else:
            matrix(c, shown)
    if c.site.endswith("attn"):
        why_here(c.trace, c.site, c.layer, c.head, "attention")


def matrix(c: Choice, shown: Choice) -> None:
    """The head's window as a heatmap (a click on a cell of a small one opens "Why here?" on it), its downloads, and
    a learned sink's bars."""
    if c.show_values and max(len(shown.rows), len(shown.cols)) > VALUES_UP_TO:
        st.caption(f"Values are written in the cells only up to {VALUES_UP_TO} tokens; hover for the rest.")
    drawn = shown.head_pattern  # (q_shown, k_shown)
    figure = shown.head_figure(drawn)
    if drawn.size <= CLICKABLE_CELLS and c.site.endswith("attn"):
        clickable_cells(figure, "weight", "click: why here?")
        st.plotly_chart(figure, key="attention_one_head", selection_mode="points",
                        on_select=partial(clicked_cell, "attention_one_head", shown.rows, shown.cols),
                        alt=figure_label(figure, csv=True))
    else:
        st.plotly_chart(figure, key="attention_one_head", alt=figure_label(figure, csv=True))
    whole = whole_csv(len(c.rows), len(c.cols))
    downloads(figure, f"{c.name}.{c.head}", "attention_one_head", c.table(c.head_pattern) if whole else
              shown.table(drawn))
    if shown.has_sinks:
        sink(shown, shown.sink_shares)


def sink(c: Choice, shares: np.ndarray) -> None:
    """Where the rest of each row went: the head's learned sink (GPT-OSS), a bar a query row drawn."""
    st.caption(f"The sink took {shares.mean():.1%} of head {c.head}'s attention, on average over the query rows "
               f"drawn (from {shares.min():.1%} to {shares.max():.1%}); the tokens got the rest.")
    figure = sink_bars(shares, c.queries, c.rows, f"{c.where} · head {c.head} · sink")
    st.plotly_chart(figure, key="attention_sink", alt=figure_label(figure, csv=False))


def layer_heads(c: Choice) -> None:
    st.latex(r"\hat A^{(h)}=A^{(h)}\,/\,\max_{ij}A^{(h)}_{ij}")
    st.caption("Every head of the chosen layer, each scaled to its own maximum. Heads learn different patterns. "
               "Click a head to open it.")
    thumbnails = c.trace.layer_thumbnail(c.site, c.layer, LAYER_THUMBNAIL, c.rows, c.cols)  # one layer's pass
    grid = thumbnail_grid([thumbnails], LAYER_THUMBNAIL, ~c.masked)
    heads = c.trace.facts.n_heads
    words = c.trace.facts.layer_words(c.layer)  # a hybrid's true layer number
    figure = thumbnail_figure(grid, LAYER_THUMBNAIL, f"{words}: all {heads} heads", c.colorscale, [words])
    st.plotly_chart(figure, key="attention_layer_heads", on_select="rerun", selection_mode="points",
                    alt=figure_label(figure, csv=False))
    downloads(figure, f"{c.name}.heads", "attention_layer_heads")


def model_view(c: Choice) -> None:
    st.latex(r"\hat A^{(\ell,h)}=\mathrm{shrink}\big(A^{(\ell,h)}\big)\,/\,\max\,\mathrm{shrink}\big(A^{(\ell,h)}\big)")
    st.caption("Every layer (rows) × head (columns), each shrunk to a thumbnail by averaging blocks of cells and "
               "scaled to its own maximum. Click one to open it.")
    image = model_view_image(c.trace, c.site, thumbnail_size(c.trace.facts.n_heads), c.hide_special)
    figure = model_view_figure(c.trace, c.site, image, c.colorscale)
    st.plotly_chart(figure, key="attention_model_view", on_select="rerun", selection_mode="points",
                    alt=figure_label(figure, csv=False))
    downloads(figure, f"{c.name.rsplit('.', 1)[0]}.model-view", "attention_model_view")
    roles_section(c.trace, c.site, "attention_roles")


def token_lines(c: Choice) -> None:
    st.latex(r"\text{line } i\to j:\ \text{width}\propto A^{(h)}_{ij},\quad\text{drawn when }A^{(h)}_{ij}\ge "
             + f"{DEFAULT_THRESHOLD:g}")
    st.caption("Each line joins a query token (left) to a key token (right); thicker = more attention. "
               "One colour per head: click a head in the legend to hide or show it.")
    c = window(c)
    heads_col, focus_col = st.columns([2, 1])
    heads = range(c.trace.facts.n_heads)
    chosen = heads_col.multiselect("Heads", heads, default=list(heads), key="attention_lines_heads")
    queries = c.queries
    tokens = [f"#{row} {visible_token(query)}" for row, query in zip(c.rows, queries, strict=True)]
    labels = {None: "every token", **dict(enumerate(tokens))}
    focus = focus_col.selectbox("Only the lines of", list(labels), key="attention_lines_focus",
                                format_func=labels.__getitem__)  # labels, not `c`: the session keeps format_func
    figure = c.lines_figure(chosen, focus)
    st.plotly_chart(figure, key="attention_lines", alt=figure_label(figure, csv=False))
    downloads(figure, f"{c.name}.lines", "attention_lines")


def site_statistics(trace: Trace, site: str) -> pd.DataFrame:
    """Every head's statistics (the site's summary), indexed by (layer, head); with a column SINK where some head's
    rows sum to less than 1 (a learned sink took the rest: GPT-OSS)."""
    summary = site_summary(trace, site)
    values = summary.statistics  # (layers, heads, len(STATISTICS))
    index = pd.MultiIndex.from_product([range(values.shape[0]), range(values.shape[1])], names=["layer", "head"])
    table = pd.DataFrame(values.reshape(-1, len(STATISTICS)), index=index, columns=list(STATISTICS))
    shares = 1 - summary.row_sums(*trace.masks[site].shape)  # (layers, heads)
    if (shares > SINK_SEEN).any():
        table[SINK] = shares.reshape(-1)
    return table


def statistics(c: Choice) -> None:
    st.latex(r"H=-\frac1{n_q}\sum_i\sum_j A_{ij}\log_2 A_{ij},\qquad "
             r"d=\frac1{n_q}\sum_i\sum_j A_{ij}\,|i-j|")
    table = site_statistics(c.trace, c.site)  # (layers * heads) rows
    measures = [name for name in table.columns if table[name].notna().to_numpy().any()]
    if len(measures) < len(table.columns):
        st.caption("Entropy H: how spread a head's attention is (0 = one key). To first token: the average share "
                   "of attention on the first key. Mean distance and the shares to the previous token and to itself "
                   "compare query and key positions in one sequence; cross-attention's queries (the output) and "
                   "keys (the source) are two sequences, so those are left out.")
    else:
        st.caption("Entropy H: how spread a head's attention is (0 = one key). Mean distance d: how far it looks. "
                   "Then the average share of attention on the first token, the previous one, itself; the first "
                   "two again over the queries from 16 on (what names a sink or a previous-token head), the share "
                   "on the token after the query's last earlier occurrence (an induction head's), and the mean "
                   "distance off the first token. Computed on every token, special ones included.")
    if SINK in table:
        st.caption("To the sink: the average share of a row that the head's learned sink took (one more key, no "
                   "token); the other measures read the weights on the tokens, which sum to 1 less it.")
    st.dataframe(table.loc[c.layer, measures].style.format("{:.3f}"), key="attention_stats")
    keep_valid("attention_stats_measure", measures)
    measure = st.selectbox("Every head of every layer by", measures, key="attention_stats_measure")
    values = table[measure].unstack("head")  # (layers, heads)
    figure = layer_head_heatmap(values.to_numpy(), measure, f"{c.label}: {measure}", c.colorscale)
    st.plotly_chart(figure, key="attention_stats_heatmap", alt=figure_label(figure, csv=True))
    downloads(figure, f"{c.name.rsplit('.', 1)[0]}.{measure.split(' (')[0].replace(' ', '-')}",
              "attention_stats_heatmap", constant(values))


def rollout(c: Choice) -> None:
    if Site.of(c.site).is_cross:
        st.info("Rollout follows attention through a stack of self-attention layers; choose a self-attention site.")
        return
    st.latex(r"\tilde A_\ell=\tfrac12\,\overline{A_\ell}+\tfrac12 I,\qquad R=\tilde A_L\tilde A_{L-1}\cdots\tilde A_1")
    st.caption("Attention rollout (Abnar & Zuidema, 2020): heads averaged, the residual connection added, "
               "layers multiplied. Row i: how much output position i draws on each input token.")
    summary = site_summary(c.trace, c.site)
    name = f"{c.name.rsplit('.', 1)[0]}.rollout"
    if not summary.rollout_is_exact:
        return block_rollout(c, summary.rollout, summary.rollout_starts, name)
    rolled = c.shown(summary.rollout)  # (q_shown, k_shown)
    unreachable = c.masked & (rolled == 0)  # a mask cut every path from the query to the key
    figure = c.heatmap(rolled, f"rollout · {c.label}", unreachable)
    st.plotly_chart(figure, key="attention_rollout", alt=figure_label(figure, csv=True))
    downloads(figure, name, "attention_rollout", c.table(rolled))


def block_rollout(c: Choice, rolled: np.ndarray, starts: np.ndarray, name: str) -> None:
    """A long text's rollout, on blocks of consecutive positions (model/core/attention/summary.py)."""
    blocks = len(starts) - 1
    st.caption(f"This text's {starts[-1]:,} tokens are cut into {blocks} blocks of {starts[1] - starts[0]} or so "
               "consecutive positions, and each layer's head-averaged attention into block means (how much a "
               "block's queries, on average, put on a block's keys); the rollout of those approximates the exact "
               "one, whose cost grows with the cube of the length (about 30 s at 2,048 tokens). Special tokens "
               "are included.")
    labels = block_labels(starts)
    visible = c.trace.masks[c.site]  # (n, n)
    hidden = masked_pixels(visible, blocks)  # (blocks, blocks): every cell masked (the rollout's blocks)
    figure = attention_heatmap(rolled, labels, labels, f"rollout · {c.label} · {blocks} × {blocks} blocks",
                               categories=(labels, labels), colorscale=c.colorscale, masked=hidden & (rolled == 0),
                               axis_titles=("query block", "key block"))
    st.plotly_chart(figure, key="attention_rollout", alt=figure_label(figure, csv=True))
    table = pd.DataFrame(rolled.astype(np.float32), index=labels, columns=labels)
    downloads(figure, name, "attention_rollout", constant(table))


def compare(c: Choice) -> None:
    """The chosen head in two runs (ui/compare.py), a long text through the window."""
    show_compare(window(c))


def choose(trace: Trace) -> Choice:
    """The pickers and options above the tabs (a clicked thumbnail first moves the pickers to its head)."""
    n_heads = trace.facts.n_heads
    if open_clicked_head("attention_model_view", n_heads) or open_clicked_head("attention_roles", n_heads) or \
            open_clicked_head("attention_layer_heads", n_heads, set_layer=False):
        st.session_state["view"] = "One head"
    site, layer, head = choose_head(trace)
    hide_col, scale_col, values_col = st.columns(3)
    hide_special = hide_col.toggle("Hide special tokens", key="attention_hide_special",
                                   help="Leave out <s>, </s>, [CLS], [SEP]… Rows then sum to less than 1.")
    keep_valid("attention_colorscale", COLOR_SCALES)
    colorscale = scale_col.selectbox("Colour scale", COLOR_SCALES, key="attention_colorscale")
    show_values = values_col.toggle("Show values", key="attention_show_values",
                                    help=f"Write the weights in the cells (up to {VALUES_UP_TO} tokens).")
    url_state.write(hide_special=hide_special, colorscale=colorscale, values=show_values)
    rows, cols = shown_positions(trace, site, hide_special)
    return Choice(trace, site, layer, head, rows, cols, hide_special, colorscale, show_values)


def page() -> None:
    """The page (in a function: no module global holds the trace; see ui/downloads.py)."""
    st.header("Attention")
    choice = choose(current_trace())
    shows = [model_view, one_head, layer_heads, token_lines, statistics, rollout, compare]  # as VIEWS
    show_open_tab(VIEWS, shows, "view", choice)


page()
