"""Activations: what the forward hooks capture beyond attention. The residual stream, the FFN neurons of a layer,
the norms, the logit lens, token trajectories by PCA, the shape of every module's input and output, and a mixture's
experts. Each view asks for its own hooks (ui/activations.py); only the open tab is computed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.lens import Lens
from attention_atlas.model.inspect.readout import spell_for, unembedding_for
from attention_atlas.plot.block_stream import blockwise
from attention_atlas.plot.common import layer_count, stack_tokens
from attention_atlas.plot.stream import (
    LENS_WINDOW,
    NORMS,
    STREAM,
    lens_figure,
    lens_positions,
    measures_of,
    residual_figure,
    residual_rows,
    residual_scale,
    stream_boundaries,
    stream_hooks,
)
from attention_atlas.ui import url_state
from attention_atlas.ui.activations import (
    HEATMAP_NEURONS,
    TEXT_WINDOW,
    TRAJECTORY_TOKENS,
    fall_back,
    lens_of,
    missing_hooks,
    projection,
    residual_measures,
    shapes_of_run,
    stream_trace,
)
from attention_atlas.ui.colour_scale import choose_scale, colour_scale
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name, matrix_table
from attention_atlas.ui.expert_views import experts_view
from attention_atlas.ui.norm_views import norms_view
from attention_atlas.ui.page import current_runner, current_trace, show_open_tab, trace_with, weights_here
from attention_atlas.ui.ssd_view import implicit_attention_view
from attention_atlas.viz.colour_range import WHOLE
from attention_atlas.viz.logit_lens import rank_lines
from attention_atlas.viz.neurons import coloured_text, most_active, top_neurons_per_token, top_table
from attention_atlas.viz.residual import layer_lines, layer_token_heatmap
from attention_atlas.viz.shapes import layer_diagram
from attention_atlas.viz.tokens import position_label
from attention_atlas.viz.trajectories import trajectory_figure

VIEWS = ["Residual stream", "FFN neurons", "Norms", "Logit lens", "Trajectories", "Shapes", "Experts",
         "Implicit attention"]


def choose_stack(trace: Trace) -> str:
    stacks = [s for s in ("encoder", "decoder") if layer_count(trace, s)]
    if st.session_state.get("activations_stack") not in stacks:
        st.session_state["activations_stack"] = stacks[0]
    stack = st.radio("Stack", stacks, key="activations_stack", horizontal=True, disabled=len(stacks) == 1,
                     help="An encoder-decoder has two residual streams: the source's and the output's.")
    url_state.write(activations_stack=stack if len(stacks) > 1 else None)
    return stack


def file_stem(trace: Trace, stack: str) -> str:
    return file_name(trace.facts.model_id, stack)


def residual(trace: Trace, stack: str) -> None:
    st.latex(r"x^{\ell}_{\mathrm{mid}}=x^{\ell}_{\mathrm{pre}}+\mathrm{Attn}(\cdot),\quad "
             r"x^{\ell}_{\mathrm{post}}=x^{\ell}_{\mathrm{mid}}+\mathrm{MLP}(\cdot),\quad "
             r"\cos^{\ell}_t=\frac{x^{\ell}_t\cdot x^{\ell+1}_t}{\lVert x^{\ell}_t\rVert\,\lVert x^{\ell+1}_t\rVert}")
    st.caption("Every token's residual vector is summed into, block by block (the sums before any norm; post-norm "
               "models then normalise it, and the next layer reads the normalised vector). The share is "
               "‖block output‖ / ‖the sum it went into‖; the cosine compares what a layer reads and what it hands on.")
    streamed = stream_trace(stack)
    by_block = blockwise(streamed, stack)
    if by_block:
        st.caption(("A hybrid: its stream is read at every block, softmax attention or not (the model card's layer "
                    "map)" if streamed.facts.attention_blocks or "layer map" in streamed.facts.notes else
                    "Its blocks add what they write scaled, with no sum in between to read: its stream is read at "
                    "each block's input and output") + "; a block's write is its output minus its input, its token "
                   "mixer and MLP together.")
    needed = stream_hooks(streamed, stack) if by_block else tuple(
        f"{stack}.0.{hook}" for hook in (*stream_boundaries(streamed, stack), *STREAM[3:5]))
    if missing_hooks(streamed, tuple(needed)):
        return
    measures, tokens = residual_measures(streamed, stack), stack_tokens(streamed, stack)
    labels = {label: measure for measure, (label, _) in measures_of(streamed, stack).items()}
    name = labels[st.selectbox("Measure", list(labels), key="activations_residual_measure")]
    values, rows = measures[name], residual_rows(streamed, stack, name)  # (rows, pos)
    choice = choose_scale(values, "activations_residual_scale") if name in NORMS else WHOLE  # a massive activation
    shown = residual_scale(name, values, choice)  # flattens the norms
    figure = residual_figure(streamed, stack, name, shown)
    st.plotly_chart(figure, key="activations_residual", alt=figure_label(figure, csv=True))
    downloads(figure, f"{file_stem(trace, stack)}.{name}", "activations_residual",
              lambda: matrix_table(values, rows, tokens).set_axis(rows, axis=0))
    peak = np.unravel_index(int(np.argmax(measures["boundaries"])), measures["boundaries"].shape)
    at = residual_rows(streamed, stack, "boundaries")[peak[0]]
    largest = (f"Largest residual norm: {measures['boundaries'][peak]:.4g}, at {at} of token "
               f"{position_label(int(peak[1]), tokens[peak[1]])}.")
    st.caption(f"{shown.note} {largest}" if shown.note else largest)
    if by_block:
        lines = layer_lines(measures["block"].mean(1)[None], ["‖output − input‖"],
                            f"{stack}: what each block writes, mean over tokens", "mean norm")
    else:
        lines = layer_lines(np.stack([measures["attn"].mean(1), measures["mlp"].mean(1)]),
                            ["‖attn_out‖", "‖mlp_out‖"], f"{stack}: what each block writes, mean over tokens",
                            "mean norm")
    st.plotly_chart(lines, key="activations_writes", alt=figure_label(lines, csv=False))
    downloads(lines, f"{file_stem(trace, stack)}.writes", "activations_writes")


def neurons(trace: Trace, stack: str) -> None:
    st.latex(r"h=\phi(xW_1+b_1)\in\mathbb{R}^{d_{ff}},\qquad \mathrm{MLP}(x)=hW_2+b_2")
    st.caption("The FFN's hidden layer after its activation φ (gated MLPs such as Llama's: φ(xW_gate)·xW_up). Each "
               "of its d_ff numbers is a neuron; its row of W₂ is what it writes into the stream.")
    layers = layer_count(trace, stack)
    fall_back("activations_layer", layers, "layer")
    layer_col, neuron_col, k_col = st.columns(3)
    layer = layer_col.selectbox("Layer", list(range(layers)), key="activations_layer",
                                format_func=trace.facts.layer_choice)
    hook = f"{stack}.{layer}.mlp.hook_post"
    hooked = trace_with((hook,))
    if missing_hooks(hooked, (hook,)):
        return
    hidden = hooked.captured[hook].astype(np.float32)  # (pos, d_ff)
    tokens = stack_tokens(trace, stack)
    fall_back("activations_neuron", hidden.shape[1], "neuron")
    if "activations_neuron" not in st.session_state:
        st.session_state["activations_neuron"] = int(most_active(hidden, 1)[0])
    neuron = neuron_col.number_input(f"Neuron (0–{hidden.shape[1] - 1})", 0, hidden.shape[1] - 1,
                                     key="activations_neuron", help="Opens on the layer's most active neuron.")
    top = st.session_state.get("activations_topk", 5)  # a kept or linked value, within the slider's range
    st.session_state["activations_topk"] = min(max(1, top), 20) if isinstance(top, int) else 5  # no default below
    k = k_col.slider("Top neurons per token", 1, 20, key="activations_topk")
    url_state.write(activations_layer=layer, activations_neuron=neuron, activations_topk=k)
    top_n, top_v = top_neurons_per_token(hidden, k)  # (pos, k) each
    st.dataframe(top_table(tokens, top_n, top_v), key="activations_top_table", height=260)
    start = window_start(len(tokens), TEXT_WINDOW, "activations_text_start", "First token shown")
    shown = slice(start, start + TEXT_WINDOW)
    named = trace.facts.layer_words(layer)  # a hybrid's true layer number
    text = coloured_text(tokens[shown], hidden[shown, neuron], f"{named} · neuron {neuron} on the text", start)
    st.plotly_chart(text, key="activations_text", alt=figure_label(text, csv=True))
    column = pd.DataFrame({"token": [position_label(i, t) for i, t in enumerate(tokens)],
                           "activation": hidden[:, neuron]})  # (pos,): the maker keeps this, not the layer
    downloads(text, f"{file_stem(trace, stack)}.{layer}.n{neuron}", "activations_text", constant(column))
    strongest = most_active(hidden, HEATMAP_NEURONS)
    names = [f"n{n}" for n in strongest]
    drawn = hidden[:, strongest].T  # (neurons, pos)
    shown = colour_scale(drawn, "activation", "activations_neuron_scale", signed=True)
    grid = layer_token_heatmap(drawn, names, tokens, f"{named}: the {len(names)} most active neurons (by "
                               "their peak)", "activation", "RdBu_r", shown.zrange)
    st.plotly_chart(grid, key="activations_neurons", alt=figure_label(grid, csv=True))
    if shown.note:
        st.caption(shown.note)
    downloads(grid, f"{file_stem(trace, stack)}.{layer}.neurons", "activations_neurons",
              lambda: matrix_table(drawn, names, tokens).set_axis(names, axis=0))


def window_start(n: int, width: int, key: str, label: str) -> int:
    """A slider over the first position of a window of `width` when `n` is longer; 0 otherwise."""
    if n <= width:
        return 0
    st.session_state[key] = min(max(0, st.session_state.get(key, n - width)), n - width)
    return st.slider(label, 0, n - width, key=key)


def lens(trace: Trace, stack: str) -> None:
    st.latex(r"p^{\ell}=\mathrm{softmax}\big(\mathrm{norm}_{\mathrm{final}}(x^{\ell})\,W_U\big)")
    unembedding = unembedding_for(current_runner())
    if isinstance(unembedding, str):
        st.info(unembedding, icon=":material/info:")
        return
    lens_stack = unembedding.stack
    st.caption(f"The model's own unembedding W_U, after {unembedding.final_norm}, applied to the "
               f"{lens_stack}'s stream after every layer, as if the model stopped there. At the last layer this is "
               "the model's own prediction." + (" An encoder-decoder's lens reads its decoder." if stack != lens_stack
                                                else ""))
    streamed = stream_trace(lens_stack)
    tokens = stack_tokens(streamed, lens_stack)
    start = window_start(len(tokens), LENS_WINDOW, "activations_lens_start", "First position read")
    positions = lens_positions(len(tokens), start)
    url_state.write(activations_lens_start=start if len(tokens) > LENS_WINDOW else None)
    read = lens_of(streamed, unembedding, positions)
    shown = [tokens[i] for i in positions]
    spell = spell_for(current_runner())
    grid = lens_figure(streamed, unembedding, read, spell)
    st.plotly_chart(grid, key="activations_lens", alt=figure_label(grid, csv=True))
    downloads(grid, f"{file_stem(trace, lens_stack)}.lens", "activations_lens",
              lambda: lens_table(read, shown, spell))
    chosen = st.multiselect("Positions followed", list(range(len(positions))), default=[len(positions) - 1],
                            key="activations_lens_positions",
                            format_func=lambda i: position_label(int(positions[i]), shown[i]))
    if chosen:
        finals = spell(read.final_ids.tolist())
        names = [f"{position_label(int(positions[i]), shown[i])} → {finals[i]!r}" for i in chosen]
        lines = rank_lines(read.final_ranks[:, chosen], read.final_probs[:, chosen], names,
                           "rank of the final prediction at each layer")
        st.plotly_chart(lines, key="activations_lens_ranks", alt=figure_label(lines, csv=False))
        downloads(lines, f"{file_stem(trace, lens_stack)}.lens-ranks", "activations_lens_ranks")


def lens_table(read: Lens, tokens: list[str], spell: Callable[[list[int]], list[str]]) -> pd.DataFrame:
    """The lens as a table: one row per (layer, position), the top tokens and their probabilities."""
    layers, n, k = read.top_ids.shape
    words = np.array(spell(read.top_ids.reshape(-1).tolist()), dtype=object).reshape(layers, n, k)
    rows = [{"layer": layer, "position": position_label(int(read.positions[j]), tokens[j]),
             **{f"top {r + 1}": words[layer, j, r] for r in range(k)},
             **{f"p {r + 1}": float(read.top_probs[layer, j, r]) for r in range(k)},
             "rank of final": int(read.final_ranks[layer, j])} for layer in range(layers) for j in range(n)]
    return pd.DataFrame(rows)


def trajectories(trace: Trace, stack: str) -> None:
    st.latex(r"z^{\ell}_t=(x^{\ell}_t-\bar x)\,[v_1\ v_2],\quad X-\bar x=U\Sigma V^\top")
    st.caption("Each token's vector before layer 0 and after every layer, projected on the two directions of "
               "largest variance of all of them (PCA fitted on every layer's vectors of this text). One line per "
               "token, from the embedding (small dot) to the last layer (large dot, labelled).")
    streamed = stream_trace(stack)
    tokens = stack_tokens(streamed, stack)
    fit, points = projection(streamed, stack)  # points: (layers + 1, pos, 2)
    default = np.unique(np.linspace(0, len(tokens) - 1, min(TRAJECTORY_TOKENS, len(tokens))).astype(int)).tolist()
    chosen = st.multiselect("Tokens", list(range(len(tokens))), default=default, key="activations_traj_tokens",
                            format_func=lambda i: position_label(i, tokens[i]))
    if not chosen:
        st.info("Choose at least one token.")
        return
    figure = trajectory_figure(points[:, chosen], [tokens[i] for i in chosen], chosen, fit,
                               f"{stack}: token trajectories across layers (PCA)")
    st.plotly_chart(figure, key="activations_trajectories", alt=figure_label(figure, csv=True))
    downloads(figure, f"{file_stem(trace, stack)}.trajectories", "activations_trajectories",
              lambda: pd.DataFrame({"layer": np.repeat(np.arange(points.shape[0]), len(chosen)),
                                    "token": [position_label(i, tokens[i]) for i in chosen] * points.shape[0],
                                    "pc1": points[:, chosen, 0].reshape(-1), "pc2": points[:, chosen, 1].reshape(-1)}))


def shapes(trace: Trace, stack: str) -> None:
    st.latex(r"(n,\,d_{model})\xrightarrow{W_Q,W_K,W_V}(h,\,n,\,d_{head})\xrightarrow{QK^\top/\sqrt{d_{head}}}"
             r"(h,\,n,\,n)\xrightarrow{\cdot V,\ W_O}(n,\,d_{model})\xrightarrow{W_1}(n,\,d_{ff})"
             r"\xrightarrow{W_2}(n,\,d_{model})")
    st.caption("Every module one forward pass over this text entered, in order, with the shapes of its tensor "
               "inputs and outputs (batch first) and its own parameters (shared weights count in each module "
               "that holds them).")
    if not weights_here("The shapes view (one forward pass traced module by module)"):
        return
    table = shapes_of_run(trace, current_runner())
    filter_col, leaves_col = st.columns([2, 1])
    text = filter_col.text_input("Filter modules", key="activations_shape_filter",
                                 placeholder="e.g. attn, Linear, layers.0")
    leaves = leaves_col.toggle("Leaf modules only", key="activations_shape_leaves")
    shown = table[table["leaf"]] if leaves else table
    if text:
        match = shown["module"].str.contains(text, case=False, regex=False)
        shown = shown[match | shown["type"].str.contains(text, case=False, regex=False)]
    st.caption(f"{len(shown):,} of {len(table):,} module calls; {int(table['leaf'].sum()):,} leaf calls.")
    st.dataframe(shown.drop(columns=["depth"]).rename(columns=lambda c: c.replace("_", " ")),
                 key="activations_shape_table", height=320)
    downloads_table(shown, f"{file_stem(trace, stack)}.shapes")
    layers = layer_count(trace, stack)
    fall_back("activations_shape_layer", layers, "layer")
    layer = st.selectbox("Diagram of layer", list(range(layers)), key="activations_shape_layer",
                         format_func=trace.facts.layer_choice)
    rows = table[(table["stack"] == stack) & (table["layer"] == layer)]
    if not len(rows):  # paths without a stack name (GPT-2's h.0, Llama's layers.0)
        rows = table[table["layer"] == layer]
    st.caption("The diagram: the layer's leaf modules in the order they ran (dropout left out), each arrow labelled "
               "with the shape the module above it returned. Modules that read the same input (the Q, K and V "
               "projections) run one after the other, so they appear one under the other.")
    figure = layer_diagram(rows, f"{stack} {trace.facts.layer_words(layer)}: the shapes on the arrows (batch left out)")
    st.plotly_chart(figure, key="activations_shape_diagram", alt=figure_label(figure, csv=False))
    downloads(figure, f"{file_stem(trace, stack)}.{layer}.diagram", "activations_shape_diagram")


def downloads_table(table: pd.DataFrame, name: str) -> None:
    st.download_button("CSV", data=lambda: table.to_csv().encode(), file_name=f"{name}.csv", mime="text/csv",
                       key="activations_shape_csv", on_click="ignore", icon=":material/download:")


def page() -> None:
    """The page (in a function: module globals that held the trace would be kept by what the session keeps)."""
    st.header("Activations")
    trace = current_trace()
    stack = choose_stack(trace)
    shows = [residual, neurons, norms_view, lens, trajectories, shapes, experts_view,
             implicit_attention_view]  # in the order of VIEWS
    show_open_tab(VIEWS, shows, "activations_view", trace, stack)


page()
