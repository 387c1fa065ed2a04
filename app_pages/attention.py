"""Attention: the whole model at a glance (the view it opens on: click a head to open it), one head, every
head of a layer, the token line view, head statistics and rollout, with display options and downloads.
Only the open tab is computed and sent."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd
import streamlit as st

from model.tracing import Trace
from ui.downloads import downloads
from ui.pickers import SITE_LABELS, choose_head, open_clicked_head
from ui.trace_cache import per_trace
from viz.head_lines import DEFAULT_THRESHOLD, head_lines_figure
from viz.head_stats import attention_rollout, head_statistics
from viz.heatmap import COLOR_SCALES, VALUES_UP_TO, WINDOW, attention_heatmap, layer_head_heatmap
from viz.thumbnails import thumbnail_figure, thumbnail_grid
from viz.tokens import visible_token

VIEWS = ["Model view", "One head", "All heads of this layer", "Token lines", "Head statistics", "Rollout"]
LAYER_THUMBNAIL = 96  # pixels per head when showing one layer


@dataclass(frozen=True)
class Choice:
    """What the person chose above the tabs, and the chosen layer's attention as drawn."""

    trace: Trace
    site: str
    layer: int
    head: int
    rows: np.ndarray  # (q_shown,) query positions drawn
    cols: np.ndarray  # (k_shown,) key positions drawn
    hide_special: bool
    colorscale: str
    show_values: bool

    def shown(self, matrix: np.ndarray) -> np.ndarray:
        """(..., q_len, k_len) -> (..., q_shown, k_shown) float32 (a copy only where something is left out)."""
        if len(self.rows) < matrix.shape[-2] or len(self.cols) < matrix.shape[-1]:
            matrix = matrix[..., self.rows, :][..., self.cols]
        return matrix.astype(np.float32, copy=False)

    @cached_property
    def pattern(self) -> np.ndarray:
        """(heads, q_shown, k_shown): the chosen layer as drawn."""
        return self.shown(self.trace.attention[self.trace.pattern_name(self.site, self.layer)])

    @property
    def head_pattern(self) -> np.ndarray:
        """(q_shown, k_shown): the chosen head as drawn, without converting the other heads."""
        return self.shown(self.trace.attention[self.trace.pattern_name(self.site, self.layer)][self.head])

    @property
    def queries(self) -> list[str]:
        return [self.trace.query_tokens(self.site)[i] for i in self.rows]

    @property
    def keys(self) -> list[str]:
        return [self.trace.key_tokens(self.site)[i] for i in self.cols]

    @property
    def name(self) -> str:
        """A file name stem: model, site, layer."""
        return f"{self.trace.facts.model_id.replace('/', '_')}.{self.site}.{self.layer}"

    @property
    def where(self) -> str:
        return f"{SITE_LABELS[self.site]} · layer {self.layer}"

    def heatmap(self, matrix: np.ndarray, title: str):
        """A (q_shown, k_shown) matrix with the chosen options. Hidden special tokens take weight with them,
        so the colours then stretch over what is shown."""
        top = (float(matrix.max()) or 1.0) if self.hide_special else 1.0
        return attention_heatmap(matrix, self.queries, self.keys, title, row_positions=self.rows,
                                 col_positions=self.cols, colorscale=self.colorscale, show_values=self.show_values,
                                 zrange=(0.0, top))


def shown_positions(trace: Trace, site: str, hide_special: bool) -> tuple[np.ndarray, np.ndarray]:
    """The query and key positions to draw: all, or all but the special tokens (if any are left)."""
    rows, cols = np.arange(len(trace.query_ids(site))), np.arange(len(trace.key_ids(site)))
    if hide_special:
        plain_rows = rows[~trace.is_special(trace.query_ids(site))]
        plain_cols = cols[~trace.is_special(trace.key_ids(site))]
        if len(plain_rows) and len(plain_cols):
            return plain_rows, plain_cols
    return rows, cols


def thumbnail_size(layers: int, heads: int) -> int:
    """Pixels per head in the model view: large for small models, at least 24 for SmolLM2's 30 x 9."""
    return max(24, min(96, 720 // max(layers, heads)))


def model_view_image(trace: Trace, site: str, size: int, hide_special: bool) -> np.ndarray:
    """The thumbnail grid of a site, computed once per trace (kept with it in the trace cache)."""

    def grid() -> np.ndarray:
        rows, cols = shown_positions(trace, site, hide_special)
        layers = (trace.attention[trace.pattern_name(site, i)] for i in range(trace.n_layers(site)))  # unpacked lazily
        return thumbnail_grid((pattern[:, rows][:, :, cols] for pattern in layers), size)  # (layers*cell, heads*cell)

    return per_trace(trace, ("model view", site, size, hide_special), grid)


def rollout_matrix(trace: Trace, site: str) -> np.ndarray:
    """(q_len, k_len) attention rollout of a site, computed once per trace (1 s for SmolLM2 at 512 tokens)."""

    def rolled() -> np.ndarray:
        return attention_rollout(trace.attention[trace.pattern_name(site, i)] for i in range(trace.n_layers(site)))

    return per_trace(trace, ("rollout", site), rolled)


def _range(label: str, n: int, default: tuple[int, int], key: str) -> tuple[int, int]:
    """A range slider over 0..n whose remembered value is dropped when it no longer fits (a shorter text)."""
    remembered = st.session_state.get(key)
    if remembered is not None and not 0 <= remembered[0] <= remembered[1] <= n:
        del st.session_state[key]
    start, stop = st.slider(label, 0, n, default, key=key)
    return start, min(stop, start + WINDOW)


def window(c: Choice) -> Choice:
    """Long texts: up to WINDOW x WINDOW cells at full resolution, chosen with two sliders (by default the
    last WINDOW queries and, for self-attention, the same keys: the band around the diagonal)."""
    n_q, n_k = len(c.rows), len(c.cols)
    if max(n_q, n_k) <= WINDOW:
        return c
    st.info(f"{n_q:,} × {n_k:,} cells are too many to draw one by one: choose a window of up to "
            f"{WINDOW} × {WINDOW}. The other tabs show the whole matrix shrunk; the CSV holds all of it.")
    q_col, k_col = st.columns(2)
    with q_col:
        q_start, q_stop = _range("Query rows", n_q, (max(0, n_q - WINDOW), n_q), "attention_window_rows")
    same = n_q == n_k
    with k_col:
        k_start, k_stop = _range("Key columns", n_k, (q_start, q_stop) if same else (0, min(n_k, WINDOW)),
                                 "attention_window_cols")
    return replace(c, rows=c.rows[q_start:q_stop], cols=c.cols[k_start:k_stop])


def one_head(c: Choice) -> None:
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
    st.caption("Row = a query token, column = a key token; each row sums to 1. "
               "M is 0 where the mask lets a query see a key and −∞ where it does not.")
    shown = window(c)
    if c.show_values and max(len(shown.rows), len(shown.cols)) > VALUES_UP_TO:
        st.caption(f"Values are written in the cells only up to {VALUES_UP_TO} tokens; hover for the rest.")
    figure = shown.heatmap(shown.head_pattern, f"{c.where} · head {c.head}")
    st.plotly_chart(figure, key="attention_one_head")
    matrix = pd.DataFrame(c.head_pattern, index=c.queries, columns=c.keys)  # the whole head, made on click
    downloads(figure, f"{c.name}.{c.head}", "attention_one_head", matrix)


def layer_heads(c: Choice) -> None:
    st.latex(r"\hat A^{(h)}=A^{(h)}\,/\,\max_{ij}A^{(h)}_{ij}")
    st.caption("Every head of the chosen layer, each scaled to its own maximum. Heads learn different patterns. "
               "Click a head to open it.")
    grid = thumbnail_grid([c.pattern], LAYER_THUMBNAIL)
    heads = c.trace.facts.n_heads
    figure = thumbnail_figure(grid, LAYER_THUMBNAIL, f"layer {c.layer}: all {heads} heads", c.colorscale)
    st.plotly_chart(figure, key="attention_layer_heads", on_select="rerun", selection_mode="points")
    downloads(figure, f"{c.name}.heads", "attention_layer_heads")


def model_view(c: Choice) -> None:
    st.latex(r"\hat A^{(\ell,h)}=\mathrm{shrink}\big(A^{(\ell,h)}\big)\,/\,\max\,\mathrm{shrink}\big(A^{(\ell,h)}\big)")
    st.caption("Every layer (rows) × head (columns), each shrunk to a thumbnail by averaging blocks of cells and "
               "scaled to its own maximum. Click one to open it.")
    size = thumbnail_size(c.trace.n_layers(c.site), c.trace.facts.n_heads)
    image = model_view_image(c.trace, c.site, size, c.hide_special)
    figure = thumbnail_figure(image, size, f"{SITE_LABELS[c.site]}: layers × heads", c.colorscale)
    st.plotly_chart(figure, key="attention_model_view", on_select="rerun", selection_mode="points")
    downloads(figure, f"{c.name.rsplit('.', 1)[0]}.model-view", "attention_model_view")


def token_lines(c: Choice) -> None:
    st.latex(r"\text{line } i\to j:\ \text{width}\propto A^{(h)}_{ij},\quad\text{drawn when }A^{(h)}_{ij}\ge "
             + f"{DEFAULT_THRESHOLD:g}")
    st.caption("Each line joins a query token (left) to a key token (right); thicker = more attention. "
               "One colour per head: click a head in the legend to hide or show it.")
    heads_col, focus_col = st.columns([2, 1])
    heads = range(c.trace.facts.n_heads)
    chosen = heads_col.multiselect("Heads", heads, default=list(heads), key="attention_lines_heads")
    queries = c.queries
    focus = focus_col.selectbox(
        "Only the lines of", [None, *range(len(c.rows))], key="attention_lines_focus",
        format_func=lambda i: "every token" if i is None else f"#{c.rows[i]} {visible_token(queries[i])}")
    figure = head_lines_figure(c.pattern, queries, c.keys, chosen, focus, f"{c.where} · token lines")
    st.plotly_chart(figure, key="attention_lines")
    downloads(figure, f"{c.name}.lines", "attention_lines")


def site_statistics(trace: Trace, site: str) -> pd.DataFrame:
    """Every head's statistics, indexed by (layer, head), computed once per trace and site."""

    def table() -> pd.DataFrame:
        self_attention = not site.endswith("cross_attn")
        tables = [head_statistics(trace.attention[trace.pattern_name(site, i)], self_attention)
                  for i in range(trace.n_layers(site))]
        return pd.concat(tables, keys=range(len(tables)), names=["layer"])

    return per_trace(trace, ("statistics", site), table)


def statistics(c: Choice) -> None:
    st.latex(r"H=-\frac1{n_q}\sum_i\sum_j A_{ij}\log_2 A_{ij},\qquad "
             r"d=\frac1{n_q}\sum_i\sum_j A_{ij}\,|i-j|")
    st.caption("Entropy H: how spread a head's attention is (0 = one key). Mean distance d: how far it looks. "
               "The last three: the average share of attention on the first token, the previous one, itself. "
               "Computed on every token, special ones included.")
    table = site_statistics(c.trace, c.site)  # (layers * heads) rows
    st.dataframe(table.loc[c.layer].style.format("{:.3f}"), key="attention_stats")
    measures = [name for name in table.columns if table[name].notna().any()]
    measure = st.selectbox("Every head of every layer by", measures, key="attention_stats_measure")
    values = table[measure].unstack("head").to_numpy()  # (layers, heads)
    figure = layer_head_heatmap(values, measure, f"{SITE_LABELS[c.site]}: {measure}", c.colorscale)
    st.plotly_chart(figure, key="attention_stats_heatmap")
    downloads(figure, f"{c.name.rsplit('.', 1)[0]}.{measure.split(' (')[0].replace(' ', '-')}",
              "attention_stats_heatmap", table[measure].unstack("head"))


def rollout(c: Choice) -> None:
    if c.site.endswith("cross_attn"):
        st.info("Rollout follows attention through a stack of self-attention layers; choose a self-attention site.")
        return
    st.latex(r"\tilde A_\ell=\tfrac12\,\overline{A_\ell}+\tfrac12 I,\qquad R=\tilde A_L\tilde A_{L-1}\cdots\tilde A_1")
    st.caption("Attention rollout (Abnar & Zuidema, 2020): heads averaged, the residual connection added, "
               "layers multiplied. Row i: how much output position i draws on each input token.")
    rolled = c.shown(rollout_matrix(c.trace, c.site))  # (q_shown, k_shown)
    figure = c.heatmap(rolled, f"rollout · {SITE_LABELS[c.site]}")
    st.plotly_chart(figure, key="attention_rollout")
    downloads(figure, f"{c.name.rsplit('.', 1)[0]}.rollout", "attention_rollout",
              pd.DataFrame(rolled, index=c.queries, columns=c.keys))


def choose(trace: Trace) -> Choice:
    """The pickers and options above the tabs (a clicked thumbnail first moves the pickers to its head)."""
    n_heads = trace.facts.n_heads
    if open_clicked_head("attention_model_view", "attention", n_heads) or open_clicked_head(
            "attention_layer_heads", "attention", n_heads, set_layer=False):
        st.session_state["view"] = "One head"
    site, layer, head = choose_head(trace, "attention")
    hide_col, scale_col, values_col = st.columns(3)
    hide_special = hide_col.toggle("Hide special tokens", key="attention_hide_special",
                                   help="Leave out <s>, </s>, [CLS], [SEP]… Rows then sum to less than 1.")
    colorscale = scale_col.selectbox("Colour scale", COLOR_SCALES, key="attention_colorscale")
    show_values = values_col.toggle("Show values", key="attention_show_values",
                                    help=f"Write the weights in the cells (up to {VALUES_UP_TO} tokens).")
    rows, cols = shown_positions(trace, site, hide_special)
    return Choice(trace, site, layer, head, rows, cols, hide_special, colorscale, show_values)


trace: Trace | None = st.session_state.get("trace")
if trace is None:  # the frame has already said why
    st.stop()
st.header("Attention")
choice = choose(trace)
shows = [model_view, one_head, layer_heads, token_lines, statistics, rollout]  # in the order of VIEWS
for tab, show in zip(st.tabs(VIEWS, key="view", bind="query-params"), shows, strict=True):
    if tab.open:  # the other tabs cost nothing
        with tab:
            show(choice)
