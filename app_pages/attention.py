"""Attention: one head, every head of a layer, the whole model at a glance, head statistics, rollout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from model.tracing import Trace
from viz.head_stats import attention_rollout, head_statistics
from viz.heatmap import attention_heatmap
from viz.thumbnails import thumbnail_figure, thumbnail_grid

SITE_LABELS = {
    "encoder.attn": "encoder self-attention",
    "decoder.attn": "decoder self-attention (masked)",
    "decoder.cross_attn": "cross-attention (decoder → encoder)",
}
LAYER_THUMBNAIL = 96  # pixels per head when showing one layer


def thumbnail_size(layers: int, heads: int) -> int:
    """Pixels per head in the model view: large for small models, at least 24 for SmolLM2's 30 x 9."""
    return max(24, min(96, 720 // max(layers, heads)))


@st.cache_resource(max_entries=32, show_spinner=False)
def model_view(trace_key: str, site: str, size: int, _trace: Trace) -> np.ndarray:
    """The thumbnail grid of a site, computed once per trace (keyed by the run's plain inputs)."""
    return thumbnail_grid([_trace.attention[_trace.pattern_name(site, i)] for i in range(_trace.n_layers(site))], size)


trace: Trace | None = st.session_state.get("trace")
if trace is None:  # the frame has already said why
    st.stop()
key = st.session_state["trace_key"]

st.header("Attention")
site = st.radio("Attention", trace.sites(), key="attention_site", horizontal=True, format_func=SITE_LABELS.get)
col_layer, col_head = st.columns(2)
layer = col_layer.selectbox("Layer", range(trace.n_layers(site)), key="attention_layer")
head = col_head.selectbox("Head", range(trace.facts.n_heads), key="attention_head")
layer_pattern = trace.attention[trace.pattern_name(site, layer)].astype(np.float32)  # (heads, q_len, k_len)
queries, keys = trace.query_tokens(site), trace.key_tokens(site)

one_head, one_layer, whole_model, statistics, rollout = st.tabs(
    ["One head", "All heads of this layer", "Model view", "Head statistics", "Rollout"]
)
with one_head:
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
    st.caption("Row = a query token, column = a key token; each row sums to 1. "
               "M is 0 where the mask lets a query see a key and −∞ where it does not.")
    title = f"{SITE_LABELS[site]} · layer {layer} · head {head}"
    st.plotly_chart(attention_heatmap(layer_pattern[head], queries, keys, title), key="attention_one_head")
    frame = pd.DataFrame(layer_pattern[head], index=queries, columns=keys)
    st.download_button("Download this matrix (CSV)", frame.to_csv().encode(), file_name=f"{site}.{layer}.{head}.csv",
                        mime="text/csv", key="attention_csv")
with one_layer:
    st.caption("Every head of the chosen layer, each scaled to its own maximum. Heads learn different patterns.")
    grid = thumbnail_grid([layer_pattern], LAYER_THUMBNAIL)
    st.plotly_chart(thumbnail_figure(grid, LAYER_THUMBNAIL, f"layer {layer}: all {trace.facts.n_heads} heads"),
                    key="attention_layer_heads")
with whole_model:
    st.caption("Every layer (rows) × head (columns), each shrunk to a thumbnail. Choose a layer and head above "
               "to open one.")
    size = thumbnail_size(trace.n_layers(site), trace.facts.n_heads)
    image = model_view(key, site, size, trace)
    st.plotly_chart(thumbnail_figure(image, size, f"{SITE_LABELS[site]}: layers × heads"),
                    key="attention_model_view")
with statistics:
    st.caption("Entropy: how spread a head's attention is (0 = one key). Mean distance: how far it looks. "
               "The last three: the average share of attention on the first token, the previous one, itself.")
    self_attention = not site.endswith("cross_attn")
    st.dataframe(head_statistics(layer_pattern, self_attention).style.format("{:.3f}"), key="attention_stats")
with rollout:
    if site.endswith("cross_attn"):
        st.info("Rollout follows attention through a stack of self-attention layers; choose a self-attention site.")
    else:
        st.latex(r"\tilde A_\ell=\tfrac12\,\overline{A_\ell}+\tfrac12 I,\qquad "
                 r"R=\tilde A_L\tilde A_{L-1}\cdots\tilde A_1")
        st.caption("Attention rollout (Abnar & Zuidema, 2020): heads averaged, the residual connection added, "
                   "layers multiplied. Row i: how much output position i draws on each input token.")
        patterns = [trace.attention[trace.pattern_name(site, i)] for i in range(trace.n_layers(site))]
        st.plotly_chart(attention_heatmap(attention_rollout(patterns), queries, keys, f"rollout · {SITE_LABELS[site]}"),
                        key="attention_rollout")
