"""The Activations page's Norms view: what each LayerNorm or RMSNorm of a stack divides its token's vector by, and
the mean it subtracts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.norm_inputs import norm_input
from attention_atlas.plot.common import stack_tokens
from attention_atlas.ui import url_state
from attention_atlas.ui.activations import stream_trace
from attention_atlas.ui.downloads import downloads, figure_label, file_name, matrix_table
from attention_atlas.ui.page import trace_with
from attention_atlas.viz.residual import layer_token_heatmap
from attention_atlas.viz.tokens import position_label


def norms_view(trace: Trace, stack: str) -> None:
    """The Activations page's Norms view: what each norm of `stack` divides by, per token, and its input's mean."""
    st.latex(r"\mathrm{LN}(x)=\gamma\odot\frac{x-\mu}{\sigma}+\beta,\ \sigma=\sqrt{\tfrac1d\textstyle\sum_i"
             r"(x_i-\mu)^2+\epsilon};\qquad \mathrm{RMS}(x)=\gamma\odot\frac{x}{\sqrt{\tfrac1d\sum_i x_i^2+\epsilon}}")
    st.caption("What each norm divides its token's vector by (σ for LayerNorm, the RMS for RMSNorm), at every norm "
               "of the stack. A token with an outsized value carries an outsized vector (often the first token).")
    scaled = trace_with((f"{stack}.*.ln*.hook_scale", f"{stack}.ln_final.hook_scale"))
    names = [n for n in scaled.captured if n.startswith(f"{stack}.") and n.endswith("hook_scale")]
    if not names:
        st.info(f"{trace.facts.model_id} offers no norm hooks here.")
        return
    values = np.stack([scaled.captured[n][:, 0] for n in names]).astype(np.float32)  # (norms, pos)
    rows = [row_name(trace, stack, n) for n in names]
    if stack == "decoder" and trace.facts.attention_blocks:
        st.caption("A hybrid: its attention layers' norms, named by their true layer numbers (the model card's layer "
                   "map), and its final norm; its other blocks' norms are not recorded.")
    log = st.toggle("log₁₀ scale", key="activations_norm_log")
    url_state.write(activations_norm_log=log or None)
    tokens = stack_tokens(scaled, stack)
    shown = np.log10(np.maximum(values, 1e-12)) if log else values
    figure = layer_token_heatmap(shown, rows, tokens, f"{stack}: what each norm divides by",
                                 "log₁₀ σ / RMS" if log else "σ / RMS")
    st.plotly_chart(figure, key="activations_norms", alt=figure_label(figure, csv=True))
    downloads(figure, f"{file_name(trace.facts.model_id, stack)}.norms", "activations_norms",
              lambda: matrix_table(values, rows, tokens).set_axis(rows, axis=0))
    ratio = (values / np.maximum(np.median(values, axis=1, keepdims=True), 1e-12)).max(axis=0)  # (pos,)
    top = np.argsort(-ratio, kind="stable")[:5]
    st.dataframe(pd.DataFrame({"token": [position_label(int(i), tokens[i]) for i in top],
                               "largest σ / RMS": values.max(axis=0)[top],
                               "× the median token (same norm)": ratio[top]}).set_index("token"),
                 key="activations_norm_table")
    input_means(trace, stack, names, tokens)


def row_name(trace: Trace, stack: str, scale_name: str) -> str:
    """A norm's row, "3.ln2" (its layer) or "ln_final": a hybrid decoder's layers by their true numbers."""
    name = scale_name.removeprefix(f"{stack}.").removesuffix(".hook_scale")
    layer, _, norm = name.partition(".")
    if not norm or stack != "decoder" or not trace.facts.attention_blocks:
        return name
    return f"{trace.facts.attention_blocks[int(layer)]}.{norm}"


def input_means(trace: Trace, stack: str, scale_names: list[str], tokens: list[str]) -> None:
    """The mean of each norm's input per token, read from the residual stream it normalises, where the model records
    it (a block that adds a scaled sum offers none: Granite's)."""
    sources = {name: source for name in scale_names if (source := norm_input(trace.facts, name)) is not None}
    if not sources:
        return
    stream = stream_trace(stack)
    read = [name for name, source in sources.items() if source in stream.captured]
    unread = [row_name(trace, stack, name) for name in sources if name not in read]
    if unread:
        st.caption(f"This model records no hook of what {', '.join(unread)} read (a block that adds its parts "
                   "scaled offers no sum of them), so their inputs' means are not shown.")
    if not read:
        return
    means = np.stack([stream.captured[sources[name]].astype(np.float32).mean(-1) for name in read])  # (norms, pos)
    rows = [row_name(trace, stack, n) for n in read]
    rms = "RMS" in trace.facts.norm
    st.caption("The mean μ of each norm's input over d_model, per token: LayerNorm subtracts it before dividing by σ"
               + ("; RMSNorm does not subtract it (it divides the raw vector by its RMS)." if rms else ".")
               + " Read from the residual stream the norm reads (model/inspect/norm_inputs.py).")
    figure = layer_token_heatmap(means, rows, tokens, f"{stack}: the mean μ of each norm's input", "μ")
    st.plotly_chart(figure, key="activations_norm_means", alt=figure_label(figure, csv=True))
    downloads(figure, f"{file_name(trace.facts.model_id, stack)}.norm-means", "activations_norm_means",
              lambda: matrix_table(means, rows, tokens).set_axis(rows, axis=0))
