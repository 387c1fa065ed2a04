"""Masks: every mask of the run as a matrix, one head's scores before and after its mask and its probabilities,
the head with the causal mask on and off, a custom mask, padding, and why −∞ (not 0) is added. Only the open tab
is computed; each asks the model only for the hooks it shows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st
import torch

from model.core.masks import check_every_query_sees_a_key, hidden_key_pairs, outside_window_pairs
from model.core.trace.sites import Site
from model.core.trace.trace import Trace
from ui import url_state
from ui.downloads import csv_fits, csv_gigabytes, downloads, file_name, matrix_table
from ui.messages import literal
from ui.page import current_runner, current_trace, show_open_tab, trace_with
from ui.pickers import choose_head, keep_valid, site_label
from viz.heatmap import attention_heatmap
from viz.masks import (
    after_mask,
    difference_figure,
    hidden_counts,
    hidden_reasons,
    mask_figure,
    next_token_comparison,
    softmax,
    visible_range,
    why_table,
)
from viz.tokens import position_label

VIEWS = ["Masks of this run", "Scores → probabilities", "Mask on / off", "Custom mask", "Padding", "Why −∞"]
EDITORS = ["hide words", "window"]
DRAWN = 96  # the most rows and columns drawn (three figures side by side); the CSVs hold everything
PAD_MORE = 16  # the padding slider goes this many tokens past the text (within the model's limit)
TOP = 8  # next tokens compared


def name(trace: Trace, *parts: object) -> str:
    """A file name stem: model, then the parts."""
    return file_name(trace.facts.model_id, *parts)


def first_self_site(trace: Trace) -> str:
    """The self-attention that padding and blocked pairs apply to: the encoder's, or a decoder-only model's."""
    return "decoder.attn" if trace.facts.kind == "decoder" else "encoder.attn"


def hiding(trace: Trace, site: str) -> tuple[bool, tuple[tuple[int, int], ...]]:
    """(whether the causal mask hides keys at `site`, the blocked pairs that apply to it)."""
    s = Site.of(site)
    blocked = trace.options.blocked if site == first_self_site(trace) else ()
    return not s.is_cross and trace.options.causal_for(s.stack), tuple(blocked)


def heatmap(matrix: np.ndarray, trace: Trace, site: str, title: str, key: str, file: str, **options) -> None:
    """A (q_len, k_len) matrix of `trace` at `site`, its first DRAWN rows and columns, with its downloads: the CSV
    holds the whole matrix where it fits (`csv_fits`), else the corner drawn."""
    queries, keys = trace.query_tokens(site), trace.key_tokens(site)
    n_q, n_k = min(len(queries), DRAWN), min(len(keys), DRAWN)
    masked = options.pop("masked", None)
    figure = options.pop("draw", attention_heatmap)(
        matrix[:n_q, :n_k], queries[:n_q], keys[:n_k], title, height=420,
        **({"masked": masked[:n_q, :n_k]} if masked is not None else {}), **options)
    st.plotly_chart(figure, key=key)
    whole = csv_fits(len(queries), len(keys))
    if max(len(queries), len(keys)) > max(n_q, n_k):
        st.caption(f"Drawn: the first {n_q} × {n_k} of {len(queries):,} × {len(keys):,} cells; "
                   + ("the CSV holds all." if whole else "the CSV holds those drawn (all would be about "
                      f"{csv_gigabytes(len(queries), len(keys)):.1f} GB of text)."))
    if not whole:  # the session keeps the table's maker, and with it what it closes over: the corner alone
        matrix, queries, keys = np.array(matrix[:n_q, :n_k]), queries[:n_q], keys[:n_k]
    downloads(figure, file, key, lambda: matrix_table(matrix, queries, keys))


def draw_mask(trace: Trace, site: str, key: str) -> None:
    visible = trace.masks[site]  # (q_len, k_len) bool
    causal, blocked = hiding(trace, site)

    def draw(matrix: np.ndarray, *labels, **options):  # the drawn corner of the mask
        return mask_figure(matrix, hidden_reasons(matrix, causal, blocked), *labels, **options)

    heatmap(visible, trace, site, f"mask · {Site.of(site).label}", key, name(trace, site, "mask"), draw=draw)
    counts = ", ".join(f"{count:,} {reason}" for reason, count in hidden_counts(visible, causal, blocked).items())
    hidden = visible.size - np.count_nonzero(visible)
    st.caption(f"{hidden:,} of {visible.size:,} cells hidden" + (f" ({counts})." if counts else "."))


def masks_view(trace: Trace, site: str, layer: int, head: int) -> None:
    st.latex(r"M_{ij}=\begin{cases}0&\text{query } i \text{ may see key } j\\-\infty&\text{otherwise}\end{cases}"
             r"\qquad A=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)")
    st.caption("Every mask of this run: rows are queries, columns keys. Blue: the query may attend to the key. "
               "Hatched: hidden (−∞ before the softmax), tinted by what hides it. Padding and custom masks appear "
               "here when the Padding and Custom mask tabs run them.")
    sites = list(trace.masks)
    for first in range(0, len(sites), 2):  # two a row: three side by side crowd a projector
        for column, mask_site in zip(st.columns(2), sites[first:first + 2], strict=False):
            with column:
                draw_mask(trace, mask_site, f"masks_mask_{mask_site}")


def head_run(site: str, layer: int) -> tuple[Trace, str, str]:
    """This text run again capturing the layer's scores and pattern; returns the trace and the two hook names."""
    s = Site.of(site)
    scores, pattern = f"{s.stack}.{layer}.{s.kind}.hook_attn_scores", s.pattern_name(layer)
    return trace_with((scores, pattern)), scores, pattern


def scores_view(trace: Trace, site: str, layer: int, head: int) -> None:
    st.latex(r"S=\frac{QK^\top}{\sqrt{d_k}}\quad\longrightarrow\quad S+M\quad\longrightarrow\quad"
             r"\ A=\mathrm{softmax}(S+M)")
    run, scores_hook, pattern_hook = head_run(site, layer)
    scores = run.captured[scores_hook][head]  # (q_len, k_len)
    visible = run.masks[site]  # (q_len, k_len)
    low, high = visible_range(scores, visible)
    st.caption(f"Layer {layer} · head {head}. The raw scores are coloured from the smallest visible one ({low:.3g}) "
               f"to the largest ({high:.3g}); after the mask a hidden score is −∞, drawn hatched (no colour means it), "
               "and the softmax gives it exactly 0.")
    where = f"{site_label(run, site)} · layer {layer} · head {head}"
    raw_col, masked_col, prob_col = st.columns(3)
    with raw_col:
        heatmap(scores, run, site, "scores QKᵀ/√d_k", "masks_scores", name(run, site, layer, head, "scores"),
                zrange=(low, high), value_name="score")
    with masked_col:
        heatmap(after_mask(scores, visible), run, site, "scores + M", "masks_scores_masked",
                name(run, site, layer, head, "scores-masked"), zrange=(low, high), value_name="score",
                masked=~visible)
    with prob_col:
        heatmap(run.attention[pattern_hook][head], run, site, "softmax(scores + M)", "masks_probabilities",
                name(run, site, layer, head, "pattern"), masked=~visible)
    st.caption(f"All three: {where}.")


def common(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading positions two runs share (a model that generates may write other tokens under other masks)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def compare(runs: dict[str, Trace], site: str, layer: int, head: int, key: str, difference_title: str) -> None:
    """Two runs' head side by side (first, second) and second − first, over the positions both runs share."""
    (label_a, a), (label_b, b) = runs.items()
    n_q, n_k = common(a.query_ids(site), b.query_ids(site)), common(a.key_ids(site), b.key_ids(site))
    pattern_a, pattern_b = (run.head_pattern(site, layer, head)[:n_q, :n_k] for run in (a, b))  # (n_q, n_k)
    if n_q < len(a.query_ids(site)) or n_q < len(b.query_ids(site)):
        st.caption(f"The two runs generated different outputs: compared over the {n_q} query positions they share.")
    difference = pattern_b - pattern_a  # (n_q, n_k)
    columns = st.columns(3)
    for index, (label, run, pattern) in enumerate([(label_a, a, pattern_a), (label_b, b, pattern_b)]):
        with columns[index]:
            heatmap(pattern, run, site, label, f"{key}_{index}", name(run, site, layer, head, key, index),
                    masked=~run.masks[site][:n_q, :n_k])
    with columns[2]:
        heatmap(difference, a, site, difference_title, f"{key}_difference",
                name(a, site, layer, head, key, "difference"), draw=difference_figure)
    st.markdown(f"Largest change of a weight: **{float(np.abs(difference).max()):.4f}**.")
    next_tokens(runs, n_q)


def vocabulary_tokens(ids: Sequence[int]) -> list[str]:
    """Token strings of a toy model's ids (its traces keep the log-probabilities of its whole small vocabulary)."""
    return current_runner().toy.tokenizer.tokens(list(ids))


def top_tokens(run: Trace, row: int) -> tuple[list[str], np.ndarray] | None:
    """The likeliest next tokens: a causal LM's after the text; a toy model's after decoder position `row`."""
    if "top_next_tokens" in run.outputs:
        return [str(t) for t in run.outputs["top_next_tokens"][:TOP]], run.outputs["top_next_probs"][:TOP]
    if "log_probs" in run.outputs and row >= 0:
        probabilities = np.exp(run.outputs["log_probs"][row].astype(np.float64))  # (vocab,)
        ids = np.argsort(-probabilities)[:TOP]
        return vocabulary_tokens(ids), probabilities[ids]
    return None


def next_tokens(runs: dict[str, Trace], shared: int) -> None:
    """For models that write text: each run's output and its next-token choices."""
    first = next(iter(runs.values()))
    if first.facts.kind == "encoder":
        return
    decoder = "decoder.attn"
    row = common(*(run.query_ids(decoder) for run in runs.values())) - 1 if first.facts.kind != "decoder" else \
        min(shared, *(len(run.ids) for run in runs.values())) - 1
    for column, (label, run) in zip(st.columns(len(runs)), runs.items(), strict=True):
        column.caption(f"Output, {label}")
        column.code(run.output_text or "∅", language=None, wrap_lines=True)
    choices = {label: top for label, run in runs.items() if (top := top_tokens(run, row)) is not None}
    if len(choices) == len(runs):
        where = "after the text" if "top_next_tokens" in first.outputs else \
            f"after decoder position #{row} ({literal(position_label(row, first.query_tokens(decoder)[row]))})"
        st.caption(f"The likeliest next tokens {where}, with and without the mask.")
        figure = next_token_comparison(choices, "next token")
        st.plotly_chart(figure, key="masks_next_tokens")
        downloads(figure, name(first, "next-token"), "masks_next_tokens")


def on_off_view(trace: Trace, site: str, layer: int, head: int) -> None:
    s = Site.of(site)
    if s.is_cross:
        st.info("Cross-attention's only mask is the source's padding (see the Padding tab): choose a self-attention "
                "site to switch its causal mask on and off.", icon=":material/info:")
        return
    causal = trace.options.causal_for(s.stack)
    other = "off" if causal else "on"
    st.latex(r"\Delta A=\mathrm{softmax}\!\left(S+M_{\text{off}}\right)-\mathrm{softmax}\!\left(S+M_{\text{on}}\right)")
    st.caption(f"Toggled: the causal mask. This run has it {'on' if causal else 'off'} in the {s.stack}; the other "
               f"run has it {other} everywhere. Red: more weight without the mask; blue: less.")
    toggled = trace_with((s.pattern_name(layer),), causal=other)
    runs = {f"causal {'on' if causal else 'off'} (this run)": trace, f"causal {other}": toggled}
    if not causal:  # the first is always the masked run, so the difference reads off − on
        runs = dict(reversed(list(runs.items())))
    compare(runs, site, layer, head, "masks_on_off", "difference: off − on")


def editor_pairs(tokens: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """The custom mask's controls; returns its blocked (query, key) pairs."""
    n = len(tokens)
    keep_valid("masks_editor", EDITORS)
    mode = st.radio("Custom mask", EDITORS, key="masks_editor", horizontal=True,
                    help="hide words: chosen keys hidden from chosen queries. window: each token sees only keys "
                         "within a distance (a band).")
    label = lambda i: position_label(i, tokens[i])  # noqa: E731
    for key in ("masks_hide", "masks_for"):
        seed_list(key, n)
    if mode == "window":
        st.session_state["masks_window"] = min(max(0, st.session_state.get("masks_window", 1)), n - 1)
        width = st.slider("Each token sees keys at most this many positions away", 0, n - 1, key="masks_window")
        url_state.write(masks_editor=mode, masks_window=width)
        return outside_window_pairs(n, width)
    keys_col, queries_col = st.columns(2)
    keys = keys_col.multiselect("Hide these keys", range(n), key="masks_hide", format_func=label)
    queries = queries_col.multiselect("from these queries (none chosen: every query)", range(n), key="masks_for",
                                      format_func=label)
    url_state.write(masks_editor=mode, masks_hide=",".join(map(str, keys)) or None,
                    masks_for=",".join(map(str, queries)) or None)
    return hidden_key_pairs(n, keys, queries) if keys else ()


def seed_list(key: str, n: int) -> None:
    """A list widget's value: from a link on the first visit ("1,3"), kept to positions that exist."""
    if key not in st.session_state and key in st.query_params:
        st.session_state[key] = [int(v) for v in st.query_params[key].split(",") if v.isdigit()]
    if key in st.session_state:
        st.session_state[key] = [v for v in st.session_state[key] if v < n]


def custom_view(trace: Trace, site: str, layer: int, head: int) -> None:
    self_site = first_self_site(trace)
    st.latex(r"M^{\text{custom}}_{ij}=-\infty\ \text{for each chosen (query } i\text{, key } j)\text{, else } 0")
    st.caption(f"Hide keys from queries in the {Site.of(self_site).label} and run the model again with that mask "
               "added to this run's own.")
    pairs = editor_pairs(trace.query_tokens(self_site))
    if not pairs:
        st.info("Choose keys to hide (or a window) to run the model with your mask.", icon=":material/info:")
        return
    blocked = np.ones_like(trace.masks[self_site])
    blocked[tuple(np.array(pairs).T)] = False
    try:
        check_every_query_sees_a_key(torch.from_numpy(trace.masks[self_site] & blocked))
        layer = min(layer, trace.n_layers(self_site) - 1)
        custom = trace_with((Site.of(self_site).pattern_name(layer),), blocked=pairs)
    except ValueError as error:
        st.warning(f"This mask cannot run: {literal(str(error))}. Hide fewer keys, or widen the window.",
                   icon=":material/block:")
        return
    draw_mask(custom, self_site, "masks_custom_mask")
    compare({"this run": trace, "with your mask": custom}, self_site, layer, head, "masks_custom",
            "difference: yours − this run")


def padding_view(trace: Trace, site: str, layer: int, head: int) -> None:
    pad_site, n, limit = first_self_site(trace), len(trace.tokens), trace.facts.max_len
    if n >= limit:
        st.info(f"The text already fills the model's {limit:,} positions: there is no room to pad it.")
        return
    top = min(limit, n + PAD_MORE)
    st.session_state["masks_pad_to"] = min(max(n + 1, st.session_state.get("masks_pad_to", min(top, n + 4))), top)
    pad_to = st.slider("Pad the text to (tokens)", n + 1, top, key="masks_pad_to")
    url_state.write(masks_pad_to=pad_to)
    stack, layer = Site.of(pad_site).stack, min(layer, trace.n_layers(pad_site) - 1)
    output = f"{stack}.{trace.n_layers(pad_site) - 1}.hook_resid_post"
    hooks = (Site.of(pad_site).pattern_name(layer), output)
    plain, padded = trace_with(hooks), trace_with(hooks, pad_to=pad_to)
    real = len(plain.tokens)
    pattern = padded.head_pattern(pad_site, layer, head)  # (pad_to, pad_to)
    pad_weight = float(np.abs(pattern[:, real:]).max())
    change = float(np.abs(padded.captured[output][:real] - plain.captured[output][:real]).max())
    st.latex(r"M_{ij}=-\infty\ \text{for every padding key } j\ \Rightarrow\ A_{ij}=0")
    st.markdown(f"Largest weight on a padding key: **{pad_weight:g}** (exactly 0: −∞ before the softmax).  \n"
                f"Largest change of the real tokens' outputs (the last layer's residual stream, `{output}`), padded "
                f"to {len(padded.tokens)} vs not: **{change:.2g}** (floating-point rounding).")
    mask_col, head_col = st.columns(2)
    with mask_col:
        draw_mask(padded, pad_site, "masks_padding_mask")
    with head_col:
        heatmap(pattern, padded, pad_site, f"padded · layer {layer} · head {head}", "masks_padding_head",
                name(padded, pad_site, layer, head, f"pad{pad_to}"), masked=~padded.masks[pad_site])


def example_row(visible: np.ndarray) -> int | None:
    """A query with a hidden key and at least two it may see, nearest the middle (None: no such row)."""
    rows = np.flatnonzero((~visible).any(axis=1) & (visible.sum(axis=1) >= 2))
    return int(rows[np.argmin(np.abs(rows - len(visible) // 2))]) if rows.size else None


def why_view(trace: Trace, site: str, layer: int, head: int) -> None:
    run, scores_hook, pattern_hook = head_run(site, layer)
    scores, pattern = run.captured[scores_hook][head], run.attention[pattern_hook][head]  # (q_len, k_len)
    visible = run.masks[site]
    row = example_row(visible)
    if row is None:
        row, visible_row = len(scores) - 1, np.arange(scores.shape[1]) < scores.shape[1] - 1
        st.caption("Nothing is hidden from this head's queries in this run: the example hides the last key of the "
                   "last query, as a mask would.")
    else:
        visible_row = visible[row]
    keys = run.key_tokens(site)
    table = why_table(scores[row], visible_row, keys, range(len(keys)))
    st.latex(r"e^{-\infty}=0:\quad\mathrm{softmax}(s+M)_j=\frac{e^{s_j+M_j}}{\sum_k e^{s_k+M_k}}=0"
             r"\ \text{ for a hidden key, and the visible ones sum to 1}")
    hidden = ~visible_row
    leak = float(table["softmax of that"][hidden].sum())
    kept = float(table["softmax(s), hidden zeroed after"].sum())
    query = literal(position_label(row, run.query_tokens(site)[row]))
    st.markdown(
        f"Query {query}, layer {layer} · head {head}. A hidden key's score set to **0** still counts: e⁰ = 1 stays in "
        f"the sum, and the hidden keys take **{leak:.1%}** of the attention. Zeroing them after the softmax leaves a "
        f"row that sums to **{kept:.4f}**, not 1. Adding **−∞** gives them exactly 0 and the rest sum to 1. Models "
        f"often add the dtype's minimum instead (float32: {np.finfo(np.float32).min:.3g}): e to the power of it "
        "underflows to exactly 0 too, and a row with every key hidden stays a number instead of NaN.")
    if row is not None and (visible_row == visible[row]).all():
        model_row = softmax(np.where(visible_row, scores[row], -np.inf))
        st.caption(f"softmax(s + M) against the model's own pattern row: max difference "
                   f"{float(np.abs(model_row - pattern[row]).max()):.2g}.")
    st.dataframe(table.style.format("{:.4g}", subset=table.columns[1:]), key="masks_why_table")


def page() -> None:
    """The page (in a function: module globals that held the trace would be kept by what the session keeps)."""
    st.header("Masks")
    trace = current_trace()
    chosen = choose_head(trace)
    shows = [masks_view, scores_view, on_off_view, custom_view, padding_view, why_view]  # in the order of VIEWS
    show_open_tab(VIEWS, shows, "masks_view", trace, *chosen)


page()
