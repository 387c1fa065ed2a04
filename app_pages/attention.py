"""Attention: one head, every head of a layer, the whole model at a glance, the token line view, head
statistics and rollout, with display options and downloads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from model.tracing import Trace
from ui.downloads import downloads
from ui.pickers import SITE_LABELS, choose_head, open_clicked_head
from viz.head_lines import head_lines_figure
from viz.head_stats import attention_rollout, head_statistics
from viz.heatmap import COLOR_SCALES, VALUES_UP_TO, attention_heatmap
from viz.thumbnails import thumbnail_figure, thumbnail_grid
from viz.tokens import visible_token

LAYER_THUMBNAIL = 96  # pixels per head when showing one layer


def thumbnail_size(layers: int, heads: int) -> int:
    """Pixels per head in the model view: large for small models, at least 24 for SmolLM2's 30 x 9."""
    return max(24, min(96, 720 // max(layers, heads)))


@st.cache_resource(max_entries=32, show_spinner=False)
def model_view(trace_key: str, site: str, size: int, hide_special: bool, _trace: Trace) -> np.ndarray:
    """The thumbnail grid of a site, computed once per trace (keyed by the run's plain inputs)."""
    rows, cols = shown_positions(_trace, site, hide_special)
    layers = [_trace.attention[_trace.pattern_name(site, i)] for i in range(_trace.n_layers(site))]
    return thumbnail_grid([pattern[:, rows][:, :, cols] for pattern in layers], size)


def shown_positions(trace: Trace, site: str, hide_special: bool) -> tuple[np.ndarray, np.ndarray]:
    """The query and key positions to draw: all, or all but the special tokens (if any are left)."""
    rows, cols = np.arange(len(trace.query_ids(site))), np.arange(len(trace.key_ids(site)))
    if hide_special:
        plain_rows = rows[~trace.is_special(trace.query_ids(site))]
        plain_cols = cols[~trace.is_special(trace.key_ids(site))]
        if len(plain_rows) and len(plain_cols):
            return plain_rows, plain_cols
    return rows, cols


trace: Trace | None = st.session_state.get("trace")
if trace is None:  # the frame has already said why
    st.stop()
n_heads = trace.facts.n_heads
name = trace.facts.model_id.replace("/", "_")

st.header("Attention")
open_clicked_head("attention_model_view", "attention", n_heads)
open_clicked_head("attention_layer_heads", "attention", n_heads, set_layer=False)
site, layer, head = choose_head(trace, "attention")
hide_col, scale_col, values_col = st.columns(3)
hide_special = hide_col.toggle("Hide special tokens", key="attention_hide_special",
                               help="Leave out <s>, </s>, [CLS], [SEP]… Rows then sum to less than 1.")
colorscale = scale_col.selectbox("Colour scale", COLOR_SCALES, key="attention_colorscale")
show_values = values_col.toggle("Show values", key="attention_show_values",
                                help=f"Write the weights in the cells (up to {VALUES_UP_TO} tokens).")

rows, cols = shown_positions(trace, site, hide_special)
layer_pattern = trace.attention[trace.pattern_name(site, layer)][:, rows][:, :, cols]  # (heads, q_shown, k_shown)
layer_pattern = layer_pattern.astype(np.float32)
queries = [trace.query_tokens(site)[i] for i in rows]
keys = [trace.key_tokens(site)[i] for i in cols]
style = {"row_positions": rows, "col_positions": cols, "colorscale": colorscale, "show_values": show_values}


def colour_range(matrix: np.ndarray) -> tuple[float, float]:
    """0 to 1; with special tokens hidden the shown weights may not reach 1, so stretch over them."""
    return (0.0, float(matrix.max()) or 1.0) if hide_special else (0.0, 1.0)


where = f"{SITE_LABELS[site]} · layer {layer}"

one_head, one_layer, whole_model, lines, statistics, rollout = st.tabs(
    ["One head", "All heads of this layer", "Model view", "Token lines", "Head statistics", "Rollout"]
)
with one_head:
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
    st.caption("Row = a query token, column = a key token; each row sums to 1. "
               "M is 0 where the mask lets a query see a key and −∞ where it does not.")
    if show_values and max(len(rows), len(cols)) > VALUES_UP_TO:
        st.caption(f"Values are written in the cells only up to {VALUES_UP_TO} tokens; hover for the rest.")
    figure = attention_heatmap(layer_pattern[head], queries, keys, f"{where} · head {head}",
                               zrange=colour_range(layer_pattern[head]), **style)
    st.plotly_chart(figure, key="attention_one_head")
    matrix = pd.DataFrame(layer_pattern[head], index=queries, columns=keys)
    downloads(figure, f"{name}.{site}.{layer}.{head}", "attention_one_head", matrix)
with one_layer:
    st.caption("Every head of the chosen layer, each scaled to its own maximum. Heads learn different patterns. "
               "Click a head to open it.")
    grid = thumbnail_grid([layer_pattern], LAYER_THUMBNAIL)
    figure = thumbnail_figure(grid, LAYER_THUMBNAIL, f"layer {layer}: all {n_heads} heads", colorscale)
    st.plotly_chart(figure, key="attention_layer_heads", on_select="rerun", selection_mode="points")
    downloads(figure, f"{name}.{site}.{layer}.heads", "attention_layer_heads")
with whole_model:
    st.caption("Every layer (rows) × head (columns), each shrunk to a thumbnail. Click one to open it.")
    size = thumbnail_size(trace.n_layers(site), n_heads)
    image = model_view(st.session_state["trace_key"], site, size, hide_special, trace)
    figure = thumbnail_figure(image, size, f"{SITE_LABELS[site]}: layers × heads", colorscale)
    st.plotly_chart(figure, key="attention_model_view", on_select="rerun", selection_mode="points")
    downloads(figure, f"{name}.{site}.model-view", "attention_model_view")
with lines:
    st.caption("Each line joins a query token (left) to a key token (right); thicker = more attention. "
               "One colour per head: click a head in the legend to hide or show it.")
    heads_col, focus_col = st.columns([2, 1])
    chosen_heads = heads_col.multiselect("Heads", range(n_heads), default=list(range(n_heads)),
                                         key="attention_lines_heads")
    focus = focus_col.selectbox(
        "Only the lines of", [None, *range(len(rows))], key="attention_lines_focus",
        format_func=lambda i: "every token" if i is None else f"#{rows[i]} {visible_token(queries[i])}")
    figure = head_lines_figure(layer_pattern, queries, keys, chosen_heads, focus, f"{where} · token lines")
    st.plotly_chart(figure, key="attention_lines")
    downloads(figure, f"{name}.{site}.{layer}.lines", "attention_lines")
with statistics:
    st.caption("Entropy: how spread a head's attention is (0 = one key). Mean distance: how far it looks. "
               "The last three: the average share of attention on the first token, the previous one, itself. "
               "Computed on every token, special ones included.")
    full_layer = trace.attention[trace.pattern_name(site, layer)]  # (heads, q_len, k_len)
    self_attention = not site.endswith("cross_attn")
    st.dataframe(head_statistics(full_layer, self_attention).style.format("{:.3f}"), key="attention_stats")
with rollout:
    if site.endswith("cross_attn"):
        st.info("Rollout follows attention through a stack of self-attention layers; choose a self-attention site.")
    else:
        st.latex(r"\tilde A_\ell=\tfrac12\,\overline{A_\ell}+\tfrac12 I,\qquad "
                 r"R=\tilde A_L\tilde A_{L-1}\cdots\tilde A_1")
        st.caption("Attention rollout (Abnar & Zuidema, 2020): heads averaged, the residual connection added, "
                   "layers multiplied. Row i: how much output position i draws on each input token.")
        patterns = [trace.attention[trace.pattern_name(site, i)] for i in range(trace.n_layers(site))]
        rolled = attention_rollout(patterns)[np.ix_(rows, cols)]  # (q_shown, k_shown)
        figure = attention_heatmap(rolled, queries, keys, f"rollout · {SITE_LABELS[site]}",
                                   zrange=colour_range(rolled), **style)
        st.plotly_chart(figure, key="attention_rollout")
        downloads(figure, f"{name}.{site}.rollout", "attention_rollout", pd.DataFrame(rolled, index=queries,
                                                                                       columns=keys))
