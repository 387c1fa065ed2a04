"""Overview: the tokens, the model's output, and one attention head."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from model.tracing import Trace
from viz.heatmap import attention_heatmap
from viz.tokens import visible_token

trace: Trace | None = st.session_state.get("trace")
if trace is None:  # the frame has already said why
    st.stop()

st.header(trace.facts.model_id)
st.caption(f"{trace.facts.family} · {trace.facts.notes.get('task', '')}")
st.metric("Output", trace.output_text or "∅")

st.subheader("Tokens")
st.dataframe(
    pd.DataFrame({"token": [visible_token(t) for t in trace.tokens], "id": trace.ids}).rename_axis("position"),
    height=min(400, 38 + 35 * len(trace.tokens)),
)

st.subheader("Attention")
site = st.radio("Attention", trace.sites(), horizontal=True, key="overview_site")
col_layer, col_head = st.columns(2)
layer = col_layer.selectbox("Layer", range(trace.n_layers(site)), key="overview_layer")
head = col_head.selectbox("Head", range(trace.facts.n_heads), key="overview_head")
pattern = trace.attention[trace.pattern_name(site, layer)][head]  # (q_len, k_len)
title = f"{site} · layer {layer} · head {head}"
st.plotly_chart(attention_heatmap(pattern, trace.query_tokens(site), trace.key_tokens(site), title))
