"""The Activations page's Experts view: in a mixture of experts, which experts the router sends each token to in a
layer, with its scores (named by its own scoring function, model/hf/router_scores.py), and how many tokens each
expert receives in every layer (mlp.hook_expert_weights and mlp.hook_expert_indices)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.router_scores import scoring_of
from attention_atlas.plot.common import layer_count, stack_tokens
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import downloads, figure_label, file_name, matrix_table
from attention_atlas.ui.page import trace_with
from attention_atlas.viz.experts import expert_load_heatmap, routing_heatmap, tokens_per_expert
from attention_atlas.viz.tokens import position_label


def experts_view(trace: Trace, stack: str) -> None:
    """Each token's experts in one layer, and every layer's load per expert; a model without experts says so."""
    routed = trace_with((f"{stack}.*.mlp.hook_expert_weights", f"{stack}.*.mlp.hook_expert_indices"))
    chosen = {i: np.asarray(routed.captured[name]) for i in range(layer_count(trace, stack))
              if (name := f"{stack}.{i}.mlp.hook_expert_indices") in routed.captured}  # layer -> (pos, k)
    if not chosen:
        st.info(f"{trace.facts.model_id} has no mixture of experts here: every token goes through the same MLP in "
                "each block.", icon=":material/info:")
        return
    routed_layers = list(chosen)  # a model may keep some blocks' MLP whole (Qwen-MoE's mlp_only_layers)
    if st.session_state.get("activations_layer") not in routed_layers:
        st.session_state["activations_layer"] = routed_layers[0]
    layer = st.selectbox("Layer", routed_layers, key="activations_layer", format_func=trace.facts.layer_choice)
    named = trace.facts.layer_words(layer)  # a hybrid's true layer number
    url_state.write(activations_layer=layer)
    scores = np.asarray(routed.captured[f"{stack}.{layer}.mlp.hook_expert_weights"], np.float32)  # (pos, experts)
    scoring = scoring_of(scores)
    st.latex(scoring.latex + r",\qquad \mathrm{MoE}(x)=\sum_{e\,\in\,\mathrm{chosen}_k}w_e\,\mathrm{Expert}_e(x)")
    indices = chosen[layer]
    experts, k = scores.shape[1], indices.shape[1]
    tokens = stack_tokens(trace, stack)
    st.caption(f"The router of {named}'s MLP scores its {experts} experts for every token ({scoring.words}) "
               f"and sends it to {k} of them (marked: the first choice 1, the second 2 …), mixing their outputs by "
               "weights w_e made from the chosen scores (an expert every token goes through, as Qwen-MoE's shared "
               "one, is not drawn here)."
               + (" A sigmoid router may choose by its scores plus a correction bias per expert, within groups of "
                  "experts (DeepSeek-V3): the marked experts need not be those scored highest here."
                  if scoring.name == "sigmoid" else "")
               + ("" if len(routed_layers) == len(range(layer_count(trace, stack))) else
                  f" Only layers {', '.join(map(str, routed_layers))} route their tokens."))
    name = file_name(trace.facts.model_id, stack, layer)
    figure = routing_heatmap(scores, indices, tokens, f"{named}: each token's experts", scoring.value_name)
    st.plotly_chart(figure, key="activations_experts", alt=figure_label(figure, csv=True))
    rows = [f"expert {e}" for e in range(experts)]
    downloads(figure, f"{name}.experts", "activations_experts", lambda: pd.concat(
        [matrix_table(scores.T, rows, tokens).set_axis(rows, axis=0),
         pd.DataFrame(indices.T, index=[f"choice {c + 1}" for c in range(k)],
                      columns=[position_label(p, t) for p, t in enumerate(tokens)])]))
    counts = tokens_per_expert(list(chosen.values()), experts)  # (routed layers, experts)
    names = [trace.facts.layer_words(i) for i in routed_layers]
    load = expert_load_heatmap(counts, names, f"{stack}: tokens each expert received, by layer")
    st.plotly_chart(load, key="activations_expert_load", alt=figure_label(load, csv=True))
    downloads(load, f"{file_name(trace.facts.model_id, stack)}.expert-load", "activations_expert_load",
              lambda: pd.DataFrame(counts, index=names, columns=rows))
    row = routed_layers.index(layer)
    idle = [f"{e}" for e in range(experts) if counts[row, e] == 0]
    st.caption(f"{named.capitalize()}: {len(tokens)} tokens × {k} choices = {int(counts[row].sum())} routings"
               + (f"; expert{'s' if len(idle) > 1 else ''} {', '.join(idle)} received none." if idle else "."))
