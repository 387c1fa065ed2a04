"""Figures of one head's computation step by step: any matrix as a heatmap titled with its shape.

Rows and columns are named by the caller (tokens as "#3 cat", dimensions as "d7"); a matrix larger than
LIMIT on a side shows its first LIMIT rows and columns, and `truncation_note` says so (the page offers the
whole matrix as CSV). Values are coloured on a diverging scale centred at 0 (weights, activations and
scores have both signs); masked cells (−∞) are hatched grey as everywhere (viz/masked.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.masked import LEGEND_ABOVE, hatch_image, legend_entry
from attention_atlas.viz.tokens import plotly_text

LIMIT = 48  # rows and columns drawn at most: a 48 x 48 grid of cells is still readable on a projector
VALUES_UP_TO = 16  # numbers are written in the cells up to this many rows and columns


def shape_text(shape: Sequence[int], names: Sequence[str]) -> str:
    """(7, 64) and ("tokens", "d_head") -> "(tokens, d_head) = (7, 64)"."""
    return f"({', '.join(names)}) = ({', '.join(str(n) for n in shape)})"


def truncation_note(shape: Sequence[int], limit: int = LIMIT) -> str | None:
    """What a person must know when a matrix is shown cut, or None when it is shown whole."""
    cut = [f"the first {limit} of {count} {what}" for count, what in zip(shape, ("rows", "columns"), strict=True)
           if count > limit]
    return f"Showing {' and '.join(cut)}; the CSV download has the whole matrix." if cut else None


def symmetric_range(values: np.ndarray) -> tuple[float, float]:
    """(−m, m) with m the largest finite |value| (1 when there is none), so that 0 is the scale's middle."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 1.0
    return -max(top, 1e-12), max(top, 1e-12)


def step_heatmap(
    values: np.ndarray,
    row_names: Sequence[str],
    col_names: Sequence[str],
    title: str,
    *,
    axis_titles: tuple[str, str] = ("token", "dimension"),
    zrange: tuple[float, float] | None = None,
    colorscale: str = "RdBu_r",
    show_values: bool = False,
    limit: int = LIMIT,
) -> go.Figure:
    """values: (rows, cols), possibly with −∞ (masked: hatched grey) and shown at most `limit` on each side.
    Hover names the row, the column and the value; names are plain text (escaped here)."""
    shown = np.asarray(values, dtype=np.float64)[:limit, :limit]
    masked = np.isneginf(shown)
    z = np.where(masked, np.nan, shown).astype(np.float32)
    rows = [plotly_text(name) for name in row_names[:limit]]
    cols = [plotly_text(name) for name in col_names[:limit]]
    low, high = zrange or symmetric_range(shown)
    heatmap = {"type": "heatmap", "z": z, "x": cols, "y": rows, "colorscale": colorscale, "zmin": low, "zmax": high,
               "hoverongaps": False, "hovertemplate": "%{y} · %{x}<br>value %{z:.4g}<extra></extra>",
               "colorbar": {"thickness": 12}}
    if show_values and max(z.shape) <= VALUES_UP_TO:
        heatmap["texttemplate"] = "%{z:.2f}"
    layout = {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": {"title": {"text": plotly_text(axis_titles[1])}, "type": "category", "automargin": True},
        "yaxis": {"title": {"text": plotly_text(axis_titles[0])}, "type": "category", "autorange": "reversed",
                  "automargin": True},
        "height": max(260, min(760, 110 + 20 * len(rows))), "margin": {"l": 60, "r": 20, "t": 60, "b": 20},
        "hoverlabel": {"font": {"size": 15}},
    }
    data = [heatmap]
    if masked.any():
        data.append(legend_entry())
        layout |= {"images": [hatch_image()], "legend": LEGEND_ABOVE, "plot_bgcolor": "rgba(0,0,0,0)"}
    return go.Figure({"data": data, "layout": layout})


def dimension_names(count: int, prefix: str = "d") -> list[str]:
    """["d0", "d1", ...]: column names of a vector's components."""
    return [f"{prefix}{i}" for i in range(count)]


def scores_latex(scale: float, d_head: int, softcap: float | None, bias: str | None) -> str:
    """S as a model computes it: ÷√d_k, T5's unscaled scores, a soft-cap (Gemma 2), + `bias`, the name of what it adds
    for positions (ALiBi, DeBERTa's c2p + p2c), if it adds any."""
    added = rf" + B_{{\text{{{bias}}}}}" if bias is not None else ""
    if softcap is not None:
        return rf"S = c \tanh\Big(\frac{{Q K^\top \times {scale:.4g}}}{{c}}\Big),\quad c = {softcap:g}"
    if scale == 1.0:
        return rf"S = Q K^\top{added}\quad\text{{(no division by }}\sqrt{{d_k}})"
    if np.isclose(scale, d_head ** -0.5):
        return rf"S = \frac{{Q K^\top}}{{\sqrt{{d_k}}}}{added},\quad d_k = {d_head}"
    return rf"S = Q K^\top \times {scale:.4g}{added}"


def softmax_latex(sink: float | None) -> str:
    """A = softmax(S + M); with a sink (GPT-OSS) its logit s joins each row's denominator and takes a share no token
    gets, so rows sum to less than 1."""
    if sink is None:
        return r"A = \mathrm{softmax}(S + M) \quad\text{(each row sums to 1; } e^{-\infty} = 0)"
    return (rf"A_{{ij}} = \frac{{e^{{(S + M)_{{ij}}}}}}{{\sum_k e^{{(S + M)_{{ik}}}} + e^{{s}}}},\quad s = {sink:.4g}"
            r"\quad\text{(the head's sink: each row sums to less than 1)}")


def latent_latex(m: dict[str, np.ndarray | None]) -> list[str]:
    """Multi-head latent attention's steps to Q, K and V with their widths, read from the shapes of its matrices
    (`latent_steps`): queries through a latent of q_rank (or straight from X), keys and values from one latent of
    `rank` a token and a rotary key part of `rope` every head shares; each query and key [nope | rope]."""
    w_qa, w_kva, c_kv, w_k, w_v = m["w_qa"], m["w_kva"], m["c_kv"], m["w_k"], m["w_v"]
    assert w_kva is not None and c_kv is not None and w_k is not None and w_v is not None
    q_rank, rank, nope, d_value = None if w_qa is None else w_qa.shape[1], c_kv.shape[1], w_k.shape[1], w_v.shape[1]
    rope = w_kva.shape[1] - rank
    query = (r"Q = X W_Q" if q_rank is None else
             rf"c_Q = \mathrm{{RMSNorm}}(X W_{{qa}}) \in \mathbb{{R}}^{{\text{{tokens}} \times {q_rank}}},\quad "
             r"Q = c_Q W_Q")
    tokens = r"\in \mathbb{R}^{\text{tokens} \times "
    return [rf"{query} = [\,Q_{{\text{{nope}}}}\ |\ Q_{{\text{{rope}}}}\,] {tokens}({nope} + {rope})}}",
            rf"X W_{{kva}} = [\,a\ |\ K_{{\text{{rope}}}}\,] {tokens}({rank} + {rope})}}"
            rf",\quad c_{{KV}} = \mathrm{{RMSNorm}}(a) {tokens}{rank}}}",
            rf"K = [\,c_{{KV}} W_K\ |\ K_{{\text{{rope}}}}\,] {tokens}({nope} + {rope})}}"
            rf",\quad V = c_{{KV}} W_V {tokens}{d_value}}}"]


def latent_steps(m: dict[str, np.ndarray | None], head: int, rows: list[str], cols: list[str]
                 ) -> tuple[list[str], list[tuple[np.ndarray, list[str], list[str], str, tuple[str, str]]]]:
    """Multi-head latent attention's formulas (`latent_latex`), and its matrices as (values, row names, column
    names, title, axis titles) in the order they are used: "w_qa" (d_model, q_rank) and "c_q" (tokens, q_rank), None
    where the queries read X; "w_q" (q_rank or d_model, nope + rope) the head's; "w_kva" (d_model, rank + rope),
    "c_kv" (key tokens, rank); "w_k" (rank, nope), "w_v" (rank, d_value) the head's. rows, cols: the query and key
    tokens' names."""
    w_qa, c_q, w_kva, c_kv = m["w_qa"], m["c_q"], m["w_kva"], m["c_kv"]
    assert w_kva is not None and c_kv is not None
    d_model, latent = dimension_names(w_kva.shape[0]), dimension_names(c_kv.shape[1], "c")
    found: list[tuple[np.ndarray, list[str], list[str], str, tuple[str, str]]] = []
    q_in, q_axis = d_model, "d_model"
    if w_qa is not None and c_q is not None:
        q_in, q_axis = dimension_names(w_qa.shape[1], "c"), "q_rank"
        found += [(w_qa, d_model, q_in, "W_qa (q_a_proj), every head's", ("d_model", "q_rank")),
                  (c_q, rows, q_in, "c_Q = RMSNorm(X W_qa)", ("tokens", "q_rank"))]
    rope = [f"r{i}" for i in range(w_kva.shape[1] - c_kv.shape[1])]
    for name, values, row_names, col_names, title, axes in (
            ("w_q", m["w_q"], q_in, None, f"W_Q, head {head}'s columns", (q_axis, "nope + rope")),
            ("w_kva", w_kva, d_model, latent + rope, "W_kva (kv_a_proj_with_mqa)", ("d_model", "rank + rope")),
            ("c_kv", c_kv, cols, latent, "c_KV, the latent after its RMSNorm", ("key tokens", "rank")),
            ("w_k", m["w_k"], latent, None, f"W_K, head {head}'s key columns of W_kvb", ("rank", "nope")),
            ("w_v", m["w_v"], latent, None, f"W_V, head {head}'s value columns of W_kvb", ("rank", "d_value"))):
        assert values is not None, name
        found.append((values, row_names, col_names or dimension_names(values.shape[1], "h"), title, axes))
    return latent_latex(m), found


def gqa_text(n_heads: int, n_kv_heads: int, head: int, kv_head: int) -> str | None:
    """What a person must know where query heads share key/value heads (grouped-query attention), else None."""
    if n_kv_heads == n_heads:
        return None
    group = n_heads // n_kv_heads
    first = kv_head * group
    return (f"Grouped-query attention: {n_heads} query heads share {n_kv_heads} key/value heads, {group} each. Query "
            f"head {head} reads key/value head {kv_head} (as do query heads {first}–{first + group - 1}): W_K, W_V, K "
            "and V below are that key/value head's.")
