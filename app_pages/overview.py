"""Overview: what the model said, the tokens it saw, the model itself, and one attention head."""

from __future__ import annotations

import streamlit as st

from model.tracing import Trace
from ui.downloads import downloads
from ui.pickers import SITE_LABELS, choose_head
from viz.heatmap import attention_heatmap, similarity_heatmap
from viz.outputs import model_card, next_token_bars, token_table

trace: Trace | None = st.session_state.get("trace")
if trace is None:  # the frame has already said why
    st.stop()
facts, outputs = trace.facts, trace.outputs

st.header(facts.model_id)
st.caption(facts.family + (f" · {facts.notes['task']}" if "task" in facts.notes else ""))
if "fallback" in facts.notes:
    st.warning(facts.notes["fallback"])

output_col, card_col = st.columns([3, 2])
with output_col:
    if facts.kind == "encoder":
        st.subheader("Token similarity")
        st.caption("An encoder's output is one vector per token. Cosine similarity of the last layer's vectors: "
                   "tokens the model sees alike are red.")
        st.plotly_chart(similarity_heatmap(outputs["token_similarity"], trace.tokens, "cosine similarity"),
                        key="overview_similarity")
    else:
        st.subheader("Output")
        st.metric("Output", trace.output_text or "∅", label_visibility="collapsed")
        if "top_next_tokens" in outputs:
            st.caption("The ten most likely next tokens after the text, with the masks chosen in the sidebar.")
            st.plotly_chart(next_token_bars(outputs["top_next_tokens"], outputs["top_next_probs"], "next token"),
                            key="overview_next_tokens")
    st.subheader("Tokens")
    st.caption("Special tokens (start, end, separator, padding) are added by the tokenizer, not typed.")
    tokens = token_table(trace.tokens, trace.ids, trace.is_special(trace.ids))
    st.dataframe(tokens, height=min(400, 38 + 35 * len(tokens)), key="overview_tokens")
with card_col:
    st.subheader("Model")
    card = model_card(facts)
    st.dataframe(card, height=38 + 35 * len(card), key="overview_card")

st.subheader("Attention")
site, layer, head = choose_head(trace, "overview")
pattern = trace.attention[trace.pattern_name(site, layer)][head]  # (q_len, k_len)
figure = attention_heatmap(pattern, trace.query_tokens(site), trace.key_tokens(site),
                           f"{SITE_LABELS[site]} · layer {layer} · head {head}")
st.plotly_chart(figure, key="overview_heatmap")
downloads(figure, f"{facts.model_id}.{site}.{layer}.{head}".replace("/", "_"), "overview_heatmap")
