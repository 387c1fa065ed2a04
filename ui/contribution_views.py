"""The Attribution page's contribution graph: the routes a prediction was computed along (model/inspect/
contributions.py), drawn over the tokens and the layers, a click on an attention edge opening the head that brings
most of it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.contributions import THRESHOLD, Edge, contribution_graph
from attention_atlas.ui.downloads import downloads, figure_label, file_name
from attention_atlas.ui.messages import literal
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.attribution import contribution_graph_figure
from attention_atlas.viz.tokens import visible_token


def contribution_section(runner: Runner, trace: Trace, position: int,
                         open_head: Callable[[str, int, int], None]) -> None:
    """The graph of the prediction at `position` of `trace` (recorded with at least `contribution_options`);
    `open_head(site, layer, head)` is called (in the chart's callback) for a clicked attention edge."""
    st.subheader("The contribution graph")
    st.caption("How the prediction was computed, token by token and layer by layer (Ferrando and Voita 2024, "
               "\"Information flow routes\"): each sum in the residual stream split into its parts (the residual, "
               "each earlier token through each head, the MLP), each part's share its closeness to the sum, and from "
               "the prediction down, the edges whose share is above the threshold. Blue: attention from one token to "
               "another; orange: the MLP; grey: the residual. Click a blue edge to open its head.")
    if runner.facts.kind != "decoder":
        st.info("The graph here follows a causal language model's prediction.", icon=":material/info:")
        return
    threshold = st.slider("Threshold: the least share an edge is followed at", 0.01, 0.3, THRESHOLD, 0.01,
                          key="attribution_graph_threshold")
    try:
        graph = per_trace(trace, ("contributions", position, threshold),
                          lambda: contribution_graph(runner, trace, position, threshold))
    except UserError as error:  # a model the graph does not apply to: said, not an error of the person's
        st.info(literal(str(error)), icon=":material/info:")
        return
    attention = [e for e in graph.edges if e.kind == "attention"]
    tokens = graph.tokens
    clickable = [((e.source + e.target) / 2, e.level + 0.5, _describe(e, tokens)) for e in attention]
    figure = contribution_graph_figure([(e.kind, e.level, e.source, e.target, e.weight) for e in graph.edges], tokens,
                                       graph.n_layers, clickable, f"The routes to the prediction after "
                                       f"{position % len(tokens)}: {visible_token(tokens[position])}")
    st.plotly_chart(figure, key="attribution_graph_edges", selection_mode="points",
                    on_select=partial(_clicked, attention, open_head), alt=figure_label(figure, csv=False))
    downloads(figure, file_name(runner.facts.model_id, "contributions", graph.position), "attribution_graph_files")


def _describe(edge: Edge, tokens: list[str]) -> str:
    share = edge.heads[edge.head] if edge.head is not None else 0.0
    return (f"layer {edge.layer}: {visible_token(tokens[edge.source])} → {visible_token(tokens[edge.target])}, share "
            f"{edge.weight:.2f}\nhead {edge.head} brings {share:.2f} of it · click to open")


def _clicked(attention: list[Edge], open_head: Callable[[str, int, int], None]) -> None:
    event = st.session_state.get("attribution_graph_edges")  # the chart's selection
    points = [p for p in event.selection.points if p.get("curve_number") == 0] if event else []
    if points:
        edge = attention[points[0]["point_index"]]
        open_head("decoder.attn", edge.layer, edge.head)
