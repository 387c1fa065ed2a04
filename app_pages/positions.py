"""Positional encoding: the paper's sinusoid (table, waves, similarity, the shift as a rotation) for a chosen length
and d_model, what the model in use does instead, and the embedding sum of the person's own tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attention_atlas.model.core import sinusoid as pe
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.positions import PositionScheme, position_scheme
from attention_atlas.plot.common import stack_tokens
from attention_atlas.plot.positions import default_size, sinusoid_figure
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import downloads, figure_label, file_name
from attention_atlas.ui.page import current_runner, current_trace, weights_here
from attention_atlas.ui.pickers import keep_valid
from attention_atlas.ui.position_model_views import model_view, tokens_view
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz import positions as viz

VIEWS = ["Sinusoid", "Waves", "Similarity", "Shift = rotation", "This model", "Your tokens"]
MEASURES = ["dot product", "cosine"]
DEFAULTS = "_positions_defaults"  # the (model, length, d_model) the size controls last defaulted to


def position_rows(length: int) -> list[str]:
    return [f"#{p}" for p in range(length)]


def dims_table(table: np.ndarray, first: str = "dim") -> pd.DataFrame:
    """(positions, d) -> a table with rows "#p" and columns "dim i", for the CSVs."""
    return pd.DataFrame(table, index=position_rows(len(table)), columns=[f"{first} {i}" for i in range(table.shape[1])])


def choose_stack(trace: Trace) -> str:
    stacks = ["encoder", "decoder"] if trace.facts.kind == "encoder-decoder" else [
        "decoder" if trace.facts.kind == "decoder" else "encoder"]
    keep_valid("positions_stack", stacks)
    if len(stacks) == 1:
        st.session_state["positions_stack"] = stacks[0]
        st.caption(f"One stack: the {stacks[0]}'s positions.")
        return stacks[0]
    return st.radio("Stack", stacks, key="positions_stack", horizontal=True,
                    help="An encoder-decoder has positions on both sides: the source's and the output's.")


def follow_defaults(defaults: tuple[str, int, int]) -> None:
    """Length and d_model open on the model's d_model and the text's length, and follow them while untouched."""
    old = st.session_state.get(DEFAULTS)
    st.session_state[DEFAULTS] = defaults
    for key, before, now in (("positions_length", old and old[1], defaults[1]),
                             ("positions_d_model", old and old[2], defaults[2])):
        if key not in st.session_state or (old is not None and st.session_state[key] == before):
            st.session_state[key] = now


def choose_size(trace: Trace, stack: str, length_col: DeltaGenerator, d_col: DeltaGenerator
                ) -> tuple[int, int, str | None]:
    """Length and d_model of the sinusoid, and why they cannot be drawn (None: they can)."""
    limit = trace.facts.max_len
    follow_defaults((trace.facts.model_id, *default_size(trace, stack)))
    length = int(length_col.number_input("Length (positions)", step=1, key="positions_length",
                                         help=f"Default: your text's length. At most {limit:,} for this model."))
    d_model = int(d_col.number_input("d_model", step=2, key="positions_d_model",
                                     help="Default: this model's width. Even: a sine and a cosine per frequency."))
    url_state.write(positions_length=length, positions_d_model=d_model)
    return length, d_model, pe.check_table_size(length, d_model, limit)


def table_for(trace: Trace, length: int, d_model: int) -> np.ndarray:
    return per_trace(trace, ("sinusoid", length, d_model), lambda: pe.sinusoid(length, d_model))


def scheme_for(trace: Trace, stack: str, length: int) -> PositionScheme:
    """What the model does, read once per trace (a rotary profile over `length` positions)."""
    return per_trace(trace, ("position scheme", stack, length), lambda: position_scheme(current_runner(), stack,
                                                                                         length))


def sinusoid_view(table: np.ndarray, name: str) -> None:
    st.latex(r"PE_{(pos,\,2i)}=\sin\!\frac{pos}{10000^{2i/d}},\qquad PE_{(pos,\,2i+1)}=\cos\!\frac{pos}{10000^{2i/d}}")
    st.caption("Row = a position, column = a dimension. Left columns turn fast (short waves), right columns slowly, "
               "so every position gets its own pattern of values in [−1, 1].")
    if max(table.shape) > viz.MAX_SIDE:
        st.caption(f"Drawn: every {viz.stride(len(table))}-th position and {viz.stride(table.shape[1])}-th dimension; "
                   "the CSV holds all of them.")
    figure = sinusoid_figure(table)
    st.plotly_chart(figure, key="positions_table", alt=figure_label(figure, csv=True))
    downloads(figure, f"{name}.sinusoid", "positions_table", lambda: dims_table(table))


def default_dims(d_model: int) -> list[int]:
    return sorted({0, 1, min(4, d_model - 2), d_model // 2, d_model - 2})


def waves_view(table: np.ndarray, name: str) -> None:
    st.latex(r"\lambda_i=2\pi\cdot10000^{2i/d}\ \text{positions per period of dimensions }2i,\,2i+1")
    d_model = table.shape[1]
    chosen = [d for d in st.session_state.get("positions_dims", default_dims(d_model)) if d < d_model]
    st.session_state["positions_dims"] = chosen or default_dims(d_model)
    dims = st.multiselect("Dimensions", range(d_model), key="positions_dims",
                          help="Even dimensions are sines, odd ones cosines of the same frequency.")
    if not dims:
        st.info("Choose at least one dimension.")
        return
    st.caption("Click a dimension in the legend to pick it out (shift-click for several).")
    chart = viz.waves_chart(table, dims, f"waves of {len(dims)} dimensions over {len(table)} positions")
    st.altair_chart(chart, key="positions_waves", alt=figure_label(chart, csv=True))
    downloads(chart, f"{name}.waves", "positions_waves", lambda: dims_table(table)[[f"dim {d}" for d in dims]])


def similarity_view(table: np.ndarray, name: str, measure: str) -> None:
    st.latex(r"S_{pq}=PE_{pos=p}\cdot PE_{pos=q}=\sum_{i}\cos\big((p-q)\,\omega_i\big),\qquad "
             r"\omega_i=10000^{-2i/d}")
    cosine = measure == "cosine"
    similarity = pe.similarity(table, cosine)  # (length, length)
    st.caption("Nearby positions are alike, far ones less so; every diagonal is constant: the similarity depends only "
               f"on the offset. At offset 0 the dot product is d/2 = {table.shape[1] // 2}.")
    figure = viz.similarity_figure(similarity, f"sinusoid · {measure} of positions", measure)
    st.plotly_chart(figure, key="positions_similarity", alt=figure_label(figure, csv=True))
    downloads(figure, f"{name}.similarity", "positions_similarity",
              lambda: pd.DataFrame(similarity, index=position_rows(len(table)), columns=position_rows(len(table))))
    profile = pd.DataFrame({"offset k": np.arange(len(table)), measure: pe.distance_profile(similarity),
                            "series": "sinusoid"})
    chart = viz.line_chart(profile, "offset k", measure, f"distance profile · {measure} vs offset k")
    st.altair_chart(chart, key="positions_profile", alt=figure_label(chart, csv=True))
    downloads(chart, f"{name}.profile", "positions_profile", lambda: profile.set_index("offset k"))


def number(label: str, key: str, top: int, default: int = 0) -> int:
    """A number input from 0 to top; a remembered value beyond a new top is brought back in range."""
    st.session_state[key] = min(max(0, int(st.session_state.get(key, default))), top)
    return int(st.number_input(label, min_value=0, max_value=top, step=1, key=key))


def shift_view(table: np.ndarray) -> None:
    st.latex(r"PE_{pos+k}=R(k)\,PE_{pos},\quad R(k)=\mathrm{diag}_i\begin{pmatrix}\cos k\omega_i & \sin k\omega_i\\"
             r"-\sin k\omega_i & \cos k\omega_i\end{pmatrix}")
    length, d_model = table.shape
    k_col, pos_col, pair_col = st.columns(3)
    with k_col:
        k = number("Offset k", "positions_offset", length - 1, min(3, length - 1))
    with pos_col:
        pos = number("Position pos", "positions_pos", length - 1 - k)
    with pair_col:
        pair = number("Dimension pair i", "positions_pair", d_model // 2 - 1)
    url_state.write(positions_offset=k, positions_pos=pos, positions_pair=pair)
    error = pe.shift_error(table, k)
    st.markdown(f"**max |R(k) PE(pos) − PE(pos+k)| = {error:.2e}** over all {length - k} positions and {d_model} "
                "dimensions (float64): moving by k positions is the same rotation wherever you start.")
    block = pe.rotation_blocks(k, d_model)[pair]  # (2, 2)
    before, after, target = table[pos, 2 * pair:2 * pair + 2], pe.shifted(table, k)[pos, 2 * pair:2 * pair + 2], \
        table[pos + k, 2 * pair:2 * pair + 2]
    st.latex(rf"\underbrace{{\begin{{pmatrix}}{block[0, 0]:.4f} & {block[0, 1]:.4f}\\ {block[1, 0]:.4f} & "
             rf"{block[1, 1]:.4f}\end{{pmatrix}}}}_{{R(k)\text{{, pair }}{pair}}}"
             rf"\begin{{pmatrix}}{before[0]:.4f}\\ {before[1]:.4f}\end{{pmatrix}}_{{pos={pos}}}="
             rf"\begin{{pmatrix}}{after[0]:.4f}\\ {after[1]:.4f}\end{{pmatrix}}\qquad PE_{{{pos + k}}}="
             rf"\begin{{pmatrix}}{target[0]:.4f}\\ {target[1]:.4f}\end{{pmatrix}}")
    st.dataframe(shift_table(table, k, pos), key="positions_shift_table", height=300)


def shift_table(table: np.ndarray, k: int, pos: int) -> pd.DataFrame:
    """Every pair i: its frequency, the entries of its 2x2 block, PE(pos), R(k) PE(pos), PE(pos+k), the error."""
    d_model = table.shape[1]
    block = pe.rotation_blocks(k, d_model)  # (pairs, 2, 2)
    rotated = pe.shifted(table, k)[pos].reshape(-1, 2)  # (pairs, 2)
    before, target = table[pos].reshape(-1, 2), table[pos + k].reshape(-1, 2)
    return pd.DataFrame({
        "ω_i": pe.frequencies(d_model), "cos kω_i": block[:, 0, 0], "sin kω_i": block[:, 0, 1],
        f"PE(#{pos}) sin": before[:, 0], f"PE(#{pos}) cos": before[:, 1],
        "R(k)PE sin": rotated[:, 0], "R(k)PE cos": rotated[:, 1],
        f"PE(#{pos + k}) sin": target[:, 0], f"PE(#{pos + k}) cos": target[:, 1],
        "|error|": np.abs(rotated - target).max(axis=1),
    }, index=pd.Index(range(d_model // 2), name="pair i"))


def page() -> None:
    st.header("Positional encoding")
    trace = current_trace()
    stack_col, measure_col, length_col, d_col = st.columns([1.2, 1.2, 1, 1], vertical_alignment="bottom")
    with stack_col:
        stack = choose_stack(trace)
    keep_valid("positions_measure", MEASURES)
    measure = measure_col.radio("Similarity", MEASURES, key="positions_measure", horizontal=True,
                                help="Dot product of two position vectors, or their cosine (the dot product of the "
                                     "vectors scaled to length 1).")
    url_state.write(positions_stack=stack, positions_measure=measure)
    length, d_model, problem = choose_size(trace, stack, length_col, d_col)
    name = file_name(trace.facts.model_id, stack)
    model_length = length if problem is None else len(stack_tokens(trace, stack))  # the text's, when refused
    for tab, view in zip(st.tabs(VIEWS, key="positions_view", bind="query-params"), VIEWS, strict=True):
        if tab.open:  # the other tabs cost nothing
            with tab:
                show(view, trace, stack, (length, d_model, problem), measure, name, model_length)


def show(view: str, trace: Trace, stack: str, size: tuple[int, int, str | None], measure: str, name: str,
         model_length: int) -> None:
    """One tab: the sinusoid views need a valid size (else they say why); the model views do not."""
    length, d_model, problem = size
    if view == "This model":
        if weights_here("This view"):
            model_view(scheme_for(trace, stack, model_length), model_length, measure, name)
    elif view == "Your tokens":
        tokens_view(stack, name)
    elif problem is not None:
        st.error(problem, icon=":material/error:")  # our own words and a number: no Markdown to escape
    else:
        table = table_for(trace, length, d_model)  # (length, d_model) float64
        if view == "Sinusoid":
            sinusoid_view(table, name)
        elif view == "Waves":
            waves_view(table, name)
        elif view == "Similarity":
            similarity_view(table, name, measure)
        else:
            shift_view(table)


page()
