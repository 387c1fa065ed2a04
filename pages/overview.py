"""Overview: the tokens, the model's output, and one attention head."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from model.tracing import Trace
from viz.heatmap import attention_heatmap
from viz.tokens import visible_token

trace: Trace | None = st.session_state.get("trace")
if trace is None:
    st.info("Type some text in the sidebar to run the model.")
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
sites = sorted({name.rsplit(".", 2)[0].split(".", 2)[0] + "." + name.split(".")[2] for name in trace.attention})
site = st.radio("Attention", sites, horizontal=True, key="overview_site")
stack, kind = site.split(".")
n_layers = trace.facts.n_encoder_layers if stack == "encoder" else trace.facts.n_decoder_layers
col_layer, col_head = st.columns(2)
layer = col_layer.selectbox("Layer", range(n_layers), key="overview_layer")
head = col_head.selectbox("Head", range(trace.facts.n_heads), key="overview_head")
pattern = trace.attention[f"{stack}.{layer}.{kind}.hook_pattern"][head]  # (q_len, k_len)
queries = trace.tokens if stack == "encoder" or not trace.target_tokens else trace.target_tokens
keys = trace.tokens if stack == "encoder" or kind == "cross_attn" or not trace.target_tokens else trace.target_tokens
st.plotly_chart(attention_heatmap(pattern, queries, keys, f"{site} · layer {layer} · head {head}"))
