"""Masks: every mask of the run as a matrix, one head's scores before and after its mask and its probabilities,
the head with the causal mask on and off, a custom mask, padding, and why −∞ (not 0) is added. Only the open tab
is computed; each asks the model only for the hooks it shows."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import check_every_query_sees_a_key
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.facts import window_words
from attention_atlas.model.inspect.positions import bias_name
from attention_atlas.model.inspect.stream_parts import stack_output
from attention_atlas.plot.common import site_label
from attention_atlas.plot.masking import first_self_site, layer_mask
from attention_atlas.ui import url_state
from attention_atlas.ui.mask_comparison import compare
from attention_atlas.ui.mask_editor import editor_pairs
from attention_atlas.ui.mask_views import draw_chunks, draw_mask, heatmap, name
from attention_atlas.ui.messages import literal
from attention_atlas.ui.page import current_trace, show_open_tab, trace_with
from attention_atlas.ui.pickers import choose_head
from attention_atlas.viz.masks import (
    after_mask,
    softmax,
    visible_range,
    why_table,
)
from attention_atlas.viz.tokens import position_label

VIEWS = ["Masks of this run", "Scores → probabilities", "Mask on / off", "Custom mask", "Padding", "Why −∞"]
PAD_MORE = 16  # the padding slider goes this many tokens past the text (within the model's limit)


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
    windows = trace.facts.windows
    if windows:
        site = first_self_site(trace)
        words = window_words(windows, trace.options.causal_for(Site.of(site).stack))
        st.markdown(f"**Sliding windows.** {words[0].upper()}{words[1:]}. A sliding layer's mask is the mask above "
                    "and its window together:")
        chosen = layer if windows[layer] else next(i for i, w in enumerate(windows) if w)
        draw_mask(trace, site, "masks_mask_window", chosen)
    draw_chunks(trace, layer)


def head_run(site: str, layer: int) -> tuple[Trace, str, str]:
    """This text run again capturing the layer's scores and pattern; returns the trace and the two hook names."""
    s = Site.of(site)
    scores, pattern = f"{s.stack}.{layer}.{s.kind}.hook_attn_scores", s.pattern_name(layer)
    return trace_with((scores, pattern)), scores, pattern


def scaled(scale: float | None, d_head: int) -> tuple[str, str]:
    """How the model scales Q Kᵀ (T5 and GPT-Neo do not), as a title reads it and in LaTeX; None: by 1/√d_k (the
    from-scratch models, whose runs keep their patterns, not what they are computed from)."""
    if scale == 1.0:
        return "QKᵀ", r"QK^\top"
    if scale is None or np.isclose(scale, d_head ** -0.5):
        return "QKᵀ/√d_k", r"\frac{QK^\top}{\sqrt{d_k}}"
    return f"QKᵀ × {scale:.3g}", rf"QK^\top\times {scale:.3g}"


def scores_view(trace: Trace, site: str, layer: int, head: int) -> None:
    run, scores_hook, pattern_hook = head_run(site, layer)
    source = run.pattern_source(site, layer)
    qk, qk_latex = scaled(None, 0) if source is None else scaled(source.scale, source.query.shape[-1])
    bias = None if source is None or source.bias is None else np.asarray(source.bias[head], np.float32)
    bias = None if bias is None or not bias.any() else bias  # T5's cross-attention: zeros
    plus_bias = "" if bias is None else rf"+B_{{\text{{{bias_name(run.facts.positional)}}}}}"
    st.latex(rf"S={qk_latex}{plus_bias}\quad\longrightarrow\quad S+M\quad\longrightarrow\quad"
             r"\ A=\mathrm{softmax}(S+M)")
    scores = run.captured[scores_hook][head]  # (q_len, k_len)
    window, chunk, visible = layer_mask(run, site, layer)  # (q_len, k_len), a sliding window's or chunks' too
    low, high = visible_range(scores, visible)
    named = run.facts.layer_words(layer)  # a hybrid's true layer number
    st.caption(f"{named.capitalize()} · head {head}. The raw scores are coloured from the smallest visible one "
               f"({low:.3g}) to the largest ({high:.3g}); after the mask a hidden score is −∞, drawn hatched (no "
               "colour means it), and the softmax gives it exactly 0.")
    where = f"{site_label(run, site)} · {named} · head {head}"
    raw_col, masked_col, prob_col = st.columns(3)
    with raw_col:
        heatmap(scores, run, site, f"scores {qk}", "masks_scores", name(run, site, layer, head, "scores"),
                zrange=(low, high), value_name="score")
    with masked_col:
        heatmap(after_mask(scores, visible), run, site, "scores + M", "masks_scores_masked",
                name(run, site, layer, head, "scores-masked"), zrange=(low, high), value_name="score",
                masked=~visible)
    with prob_col:
        heatmap(run.attention[pattern_hook][head], run, site, "softmax(scores + M)", "masks_probabilities",
                name(run, site, layer, head, "pattern"), masked=~visible)
    st.caption(f"All three: {where}." + (f" This layer slides: a query sees no key {window} or more positions away."
                                         if window else "")
               + (f" This layer reads in chunks of {chunk}: a query sees no key of another chunk." if chunk else ""))
    if source is not None and source.sinks is not None:
        st.caption(sink_words(source, head))
    if bias is not None:  # (q_len, k_len)
        bias_view(run, site, layer, head, (scores - bias, qk), bias, visible)


def sink_words(source: PatternSource, head: int) -> str:
    """Where the rest of each row of softmax(scores + M) went: the head's learned sink (GPT-OSS), one more key
    that is no token, its logit in every row's softmax and its share of each row dropped after it."""
    shares = source.sink_shares(heads=[head])[0]  # (q_len,)
    return (f"This head has a learned sink: one more key that is no token, with the logit {source.sinks[head]:.3g} "
            "(not drawn among the scores) in every row's softmax, its probability dropped after. It took "
            f"{shares.mean():.1%} of a row on average (from {shares.min():.1%} to {shares.max():.1%}), so each row of "
            "softmax(scores + M) sums to 1 less the sink's share.")


def bias_view(run: Trace, site: str, layer: int, head: int, content: tuple[np.ndarray, str], bias: np.ndarray,
              visible: np.ndarray) -> None:
    """The position bias the model added to the head's scores before the mask (T5's, ALiBi, DeBERTa's position
    terms), drawn apart: the scores without it (`content`: them and how they are scaled), and it."""
    named, (without, qk) = bias_name(run.facts.positional), content
    st.markdown(f"**Before the mask, a position bias.** This model adds {named} to every score: the scores above are "
                f"{qk} + B. Without it, and B itself:")
    low, high = visible_range(bias, visible)
    content_col, bias_col = st.columns(2)
    with content_col:
        heatmap(without, run, site, f"{qk} (without the bias)", "masks_scores_content",
                name(run, site, layer, head, "scores-without-bias"), zrange=visible_range(without, visible),
                value_name="score")
    with bias_col:
        heatmap(bias, run, site, f"B ({named})", "masks_bias", name(run, site, layer, head, "position-bias"),
                zrange=(low, high), value_name="bias", masked=~visible)
    st.caption(f"B for {site_label(run, site)} · {run.facts.layer_words(layer)} · head {head}: from {low:.3g} to "
               f"{high:.3g}, hatched where the mask then hides the key."
               + (" ALiBi's is this head's slope × (key − query): keys further back lose more."
                  if named == "ALiBi" else ""))


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
    except UserError as error:
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
    output = stack_output(trace.facts, stack)  # a hybrid's last block, attention or not
    hooks = (Site.of(pad_site).pattern_name(layer), output)
    plain, padded = trace_with(hooks), trace_with(hooks, pad_to=pad_to)
    real = len(plain.tokens)
    pattern = padded.head_pattern(pad_site, layer, head)  # (pad_to, pad_to)
    pad_weight = float(np.abs(pattern[:, real:]).max())
    st.latex(r"M_{ij}=-\infty\ \text{for every padding key } j\ \Rightarrow\ A_{ij}=0")
    st.markdown(f"Largest weight on a padding key: **{pad_weight:g}** (exactly 0: −∞ before the softmax).  \n"
                + output_change(plain, padded, output))
    mask_col, head_col = st.columns(2)
    with mask_col:
        draw_mask(padded, pad_site, "masks_padding_mask")
    with head_col:
        heatmap(pattern, padded, pad_site, f"padded · {padded.facts.layer_words(layer)} · head {head}",
                "masks_padding_head", name(padded, pad_site, layer, head, f"pad{pad_to}"),
                masked=~padded.masks[pad_site])


def output_change(plain: Trace, padded: Trace, output: str) -> str:
    """The largest change padding makes to the real tokens' `output` (the stack's last), in a sentence; or why there
    is none to show (a block that adds its parts scaled records no sum of them: Granite's)."""
    if output not in padded.captured:
        return (f"This model records no hook of its stack's output (`{output}`: a block that adds its parts scaled "
                "offers no sum of them), so the change padding makes to the real tokens' outputs is not shown.")
    real = len(plain.tokens)
    change = float(np.abs(padded.captured[output][:real] - plain.captured[output][:real]).max())
    return (f"Largest change of the real tokens' outputs (the last block's residual stream, `{output}`), padded to "
            f"{len(padded.tokens)} vs not: **{change:.2g}** (floating-point rounding).")


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
        f"Query {query}, {run.facts.layer_words(layer)} · head {head}. A hidden key's score set to **0** still "
        f"counts: e⁰ = 1 stays in the sum, and the hidden keys take **{leak:.1%}** of the attention. Zeroing them "
        f"after the softmax leaves a row that sums to **{kept:.4f}**, not 1. Adding **−∞** gives them exactly 0 and "
        f"the rest sum to 1. Models often add the dtype's minimum instead (float32: {np.finfo(np.float32).min:.3g}): "
        "e to the power of it underflows to exactly 0 too, and a row with every key hidden stays a number instead of "
        "NaN.")
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
