"""The Positional encoding page's model sections: what the model in use does with positions (beside the paper's
sinusoid), and the embedding sum of the person's own tokens from the hooks `hook_embed` / `hook_pos_embed`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core import sinusoid as pe
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.positions import PositionScheme
from attention_atlas.ui.downloads import downloads, figure_label
from attention_atlas.ui.page import trace_with
from attention_atlas.viz import positions as viz
from attention_atlas.viz.tokens import position_label


def table_frame(matrix: np.ndarray, rows: list[str]) -> pd.DataFrame:
    return pd.DataFrame(matrix, index=rows, columns=[f"dim {i}" for i in range(matrix.shape[1])])


def model_view(scheme: PositionScheme, length: int, measure: str, name: str) -> None:
    """The model's own scheme, drawn beside the sinusoid of the same size where it adds a table."""
    st.markdown(f"**{scheme.kind.capitalize()}** · from `{scheme.source}`. {scheme.about}")
    if scheme.nope:
        st.markdown(f"**NoPE** · {scheme.nope[0].upper()}{scheme.nope[1:]}.")
    if scheme.table is not None:
        absolute_view(scheme, length, measure, name)
    elif scheme.inv_freq is not None:
        rotary_view(scheme, name)
    elif scheme.kind == "relative":
        relative_view(scheme, name)


def paper_layout(table: np.ndarray, scheme: PositionScheme) -> tuple[np.ndarray, str]:
    """The sinusoid to compare a fixed table with: Marian's puts all sines first, then all cosines."""
    d_model = table.shape[1]
    reference = pe.sinusoid(len(table), d_model)
    if scheme.halves:
        return np.concatenate([reference[:, 0::2], reference[:, 1::2]], axis=1), "the sinusoid, sines first"
    return reference, "the formula"


def absolute_view(scheme: PositionScheme, length: int, measure: str, name: str) -> None:
    rows = min(length, len(scheme.table))
    table = scheme.table[:rows]  # (rows, d_model): the rows added at positions 0 .. rows-1
    if scheme.kind == "sinusoidal":
        reference, what = paper_layout(table, scheme)
        st.caption(f"max |table − {what}| over its first {rows} rows = {np.abs(table - reference).max():.2e} "
                   "(the table is stored in float32).")
    else:
        reference = pe.sinusoid(rows, table.shape[1])
    cosine = measure == "cosine"
    sims = [pe.similarity(table, cosine), pe.similarity(reference, cosine)]  # (rows, rows) each
    titles = [f"this model · rows 0–{rows - 1} of its table", "the paper's sinusoid, same size"]
    for col, matrix, title, key in zip(st.columns(2), [table, reference], titles, ["model", "paper"], strict=True):
        with col:
            figure = viz.table_heatmap(matrix, title)
            st.plotly_chart(figure, key=f"positions_{key}_table", alt=figure_label(figure, csv=False))
            downloads(figure, f"{name}.{key}-table", f"positions_{key}_table",
                      lambda matrix=matrix: table_frame(matrix, [f"#{p}" for p in range(len(matrix))]))
    for col, matrix, title, key in zip(st.columns(2), sims, titles, ["model", "paper"], strict=True):
        with col:
            figure = viz.similarity_figure(matrix, f"{measure} of positions · {title.split(' ·')[0]}", measure)
            st.plotly_chart(figure, key=f"positions_{key}_similarity", alt=figure_label(figure, csv=False))
            downloads(figure, f"{name}.{key}-similarity", f"positions_{key}_similarity")
    profile = pd.concat([pd.DataFrame({"offset k": np.arange(rows), measure: pe.distance_profile(s), "series": series})
                         for s, series in zip(sims, ["this model", "sinusoid"], strict=True)])
    chart = viz.line_chart(profile, "offset k", measure, f"distance profile · mean {measure} at offset k")
    st.altair_chart(chart, key="positions_model_profile", alt=figure_label(chart, csv=True))
    downloads(chart, f"{name}.model-profile", "positions_model_profile",
                    lambda: profile.pivot(index="offset k", columns="series", values=measure))


def rotary_view(scheme: PositionScheme, name: str) -> None:
    st.latex(r"q'_m=R_{\Theta,m}\,q,\quad k'_n=R_{\Theta,n}\,k,\quad q'_m\cdot k'_n=q^\top R_{\Theta,n-m}\,k,"
             r"\qquad\theta_i=\mathrm{base}^{-2i/r}")
    freqs = scheme.inv_freq  # (rotated dims / 2,)
    head_dim = 2 * len(freqs)
    pairs = ("pairs dimension 2i with 2i + 1, as the paper" if scheme.interleaved else "pairs dimension i with i + "
             "r/2, not 2i with 2i + 1 as the paper: the same rotations, stored in another order")
    st.caption(f"base = {scheme.rotary_base:g}, rotated dimensions r = {head_dim}; the paper's sinusoid uses base "
               f"10000. The slowest pair of this model turns once every {2 * np.pi / freqs[-1]:,.0f} positions. "
               f"(This model {pairs}.)")
    frame = pd.concat([pd.DataFrame({"pair i": np.arange(len(freqs)), "radians per position": f, "series": series})
                       for f, series in [(freqs, "this model (inv_freq)"),
                                         (pe.frequencies(head_dim), "sinusoid, base 10000")]])
    chart = viz.line_chart(frame, "pair i", "radians per position", "frequency of each dimension pair", log_y=True)
    st.altair_chart(chart, key="positions_rotary_freqs", alt=figure_label(chart, csv=True))
    downloads(chart, f"{name}.rotary-frequencies", "positions_rotary_freqs",
                    lambda: frame.pivot(index="pair i", columns="series", values="radians per position"))
    profile = scheme.rotary_profile  # (len,)
    st.markdown(f"q·k of one fixed pair, q = k = (1, …, 1), rotated at positions m and n: it depends only on the "
                f"distance m − n (pairs at the same distance differ by at most {scheme.rotary_spread:.1e}; q·k = "
                f"{profile[0]:.0f} at distance 0).")
    frame = pd.DataFrame({"distance m − n": np.arange(len(profile)), "q·k": profile, "series": "rotary"})
    chart = viz.line_chart(frame, "distance m − n", "q·k", "rotated q·k vs distance")
    st.altair_chart(chart, key="positions_rotary_profile", alt=figure_label(chart, csv=True))
    downloads(chart, f"{name}.rotary-qk", "positions_rotary_profile", lambda: frame.set_index("distance m − n"))


def relative_view(scheme: PositionScheme, name: str) -> None:
    """The score's formula, then the bias per head and distance (T5, ALiBi) or the embedding each distance reads
    (DeBERTa)."""
    st.latex(scheme.formula)
    if scheme.bias is not None:
        figure = viz.bias_heatmap(scheme.bias, "relative position bias per head")
        st.plotly_chart(figure, key="positions_bias", alt=figure_label(figure, csv=True))
        side = (scheme.bias.shape[1] - 1) // 2
        downloads(figure, f"{name}.relative-bias", "positions_bias", lambda: pd.DataFrame(
            scheme.bias, index=[f"head {h}" for h in range(len(scheme.bias))],
            columns=[f"key−query {d}" for d in range(-side, side + 1)]))
    if scheme.buckets is not None:
        side = (len(scheme.buckets) - 1) // 2
        frame = pd.DataFrame({"key − query": np.arange(-side, side + 1), "embedding row": scheme.buckets,
                              "series": "relative position"})
        chart = viz.line_chart(frame, "key − query", "embedding row", "the relative position embedding each "
                               "distance reads")
        st.altair_chart(chart, key="positions_buckets", alt=figure_label(chart, csv=True))
        downloads(chart, f"{name}.relative-buckets", "positions_buckets",
                  lambda: frame.drop(columns="series").set_index("key − query"))


def tokens_view(stack: str, name: str) -> None:
    """Token embedding, positional part and their sum for each token of the run, from the stack's hooks."""
    trace: Trace = trace_with((f"{stack}.hook_*embed",))
    embed, positional = trace.captured.get(f"{stack}.hook_embed"), trace.captured.get(f"{stack}.hook_pos_embed")
    if embed is None:
        st.info("This model's hooks do not capture its embeddings.")
        return
    tokens = trace.target_tokens if stack == "decoder" and trace.target_tokens else trace.tokens
    rows = [position_label(p, t) for p, t in enumerate(tokens)]
    st.latex(r"x_{pos}=E[\mathrm{token}_{pos}]\,(\times\sqrt{d_{model}})+PE_{pos}")
    if positional is None:
        st.info(f"{trace.facts.model_id} adds no positional vector to its embeddings ({trace.facts.positional}): "
                "the token embedding alone goes in, and positions act inside attention (see *This model*).",
                icon=":material/info:")
        parts = [("token embedding", embed)]
    else:
        parts = [("token embedding", embed), ("positional part", positional), ("sum", embed + positional)]
        st.caption("Scaled by √d_model where the model does it (the from-scratch models; BART and Marian where "
                   "configured). " + ("BERT also adds a token-type vector and normalises the sum (LayerNorm)."
                                      if "BERT" in trace.facts.family else ""))
    top = max(float(np.abs(part).max()) for _, part in parts) or 1.0
    for i, (col, (title, part)) in enumerate(zip(st.columns(len(parts)), parts, strict=True)):
        with col:
            key = f"positions_tokens_{title.split()[0]}"
            figure = viz.token_heatmap(part, tokens, f"{stack} · {title}", (-top, top), colorbar=i == len(parts) - 1)
            st.plotly_chart(figure, key=key, alt=figure_label(figure, csv=True))
            downloads(figure, f"{name}.{stack}.{title.replace(' ', '-')}", key,
                      lambda part=part: table_frame(part, rows))
