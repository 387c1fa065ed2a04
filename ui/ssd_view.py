"""The Activations page's Implicit attention view: a Mamba-2 layer's scan drawn as the matrix it is (model/hf/ssd.py),
one head at a time, on a colour scale centred at 0 (no softmax: weights can be negative, rows need not sum to 1), with
what holds it to the model: the layer's output made again from it. A model without Mamba-2 layers says so."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.ssd import MOST_TOKENS, implicit_attention, ssd_mixers
from attention_atlas.plot.common import stack_tokens
from attention_atlas.ui import url_state
from attention_atlas.ui.activations import fall_back
from attention_atlas.ui.downloads import downloads, figure_label, file_name
from attention_atlas.ui.page import current_runner
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.heatmap import matrix_heatmap


def implicit_attention_view(trace: Trace, stack: str) -> None:
    st.latex(r"y_t=\sum_{s\le t}M_{ts}\,x_s+D\,x_t,\qquad M_{ts}=(C_t\cdot B_s)\,"
             r"e^{\sum_{k=s+1}^{t}\Delta_k A}\,\Delta_s")
    model = getattr(current_runner(), "model", None)
    mixers = ssd_mixers(model) if model is not None and stack == "decoder" else {}
    if not mixers:
        st.info(f"{trace.facts.model_id} has no Mamba-2 layer: no state-space scan to draw as a matrix. (A Mamba-2 "
                "layer's scan is exactly a causal attention-like matrix: Dao & Gu 2024.)", icon=":material/info:")
        return
    kinds = trace.facts.block_kinds
    blocks = list(mixers)
    if st.session_state.get("activations_ssd_layer") not in blocks:
        st.session_state["activations_ssd_layer"] = blocks[0]
    block = st.selectbox("Layer", blocks, key="activations_ssd_layer",
                         format_func=lambda b: f"layer {b}" + (f" ({kinds[b]})" if b < len(kinds) else ""))
    try:
        with st.spinner("Running the model for the layer's scan…"), run_slots():
            found = per_trace(trace, ("implicit attention", block),
                              lambda: implicit_attention(model, trace.ids, block))
    except UserError as error:
        st.info(str(error), icon=":material/info:")
        return
    heads = len(found.matrix)
    fall_back("activations_ssd_head", heads, "head")
    head = int(st.number_input(f"Head (0–{heads - 1})", 0, heads - 1, key="activations_ssd_head"))
    url_state.write(activations_ssd_layer=block, activations_ssd_head=head)
    matrix = found.matrix[head]  # (n, n)
    sums = matrix.sum(1)
    st.caption(f"Layer {block}'s scan, head {head}: x_s is what the layer's projection and short convolution made at "
               "s, B and C its input- and output-dependent vectors, Δ its step and A < 0 the head's decay. Not a "
               f"softmax: its rows sum to {sums.min():.3g} … {sums.max():.3g}, and weights can be negative. D = "
               f"{found.skip[head]:.3g} weighs each token's own x_t beside it. Held to the model: the scan's output y "
               f"made again from M differs from the one the model's scan computed by {found.difference:.1e} of the "
               f"part M makes. Above the diagonal (a later token) there is nothing: the scan is causal. Texts of up to "
               f"{MOST_TOKENS:,} tokens.")
    reach = float(np.abs(matrix).max()) or 1.0
    tokens = stack_tokens(trace, stack)
    causal = np.where(np.tril(np.ones_like(matrix, dtype=bool)), matrix, np.nan)  # (n, n): nothing after t
    figure = matrix_heatmap(causal, tokens, tokens, f"layer {block} · head {head}: implicit attention M (no softmax)",
                            zrange=(-reach, reach), colorscale="RdBu_r", value_name="M")
    st.plotly_chart(figure, key="activations_ssd", alt=figure_label(figure, csv=False))
    downloads(figure, f"{file_name(trace.facts.model_id, stack)}.ssd.{block}.{head}", "activations_ssd_files")
