"""The Attention page's Compare view: the chosen head in this run (A) and in another run (B) side by side, and B − A
on a diverging scale. B is the same input with the other causal choice, another text of the same length, the
same input with heads ablated (model/core/capture/ablation.py), or the same input read by another model that
tokenises it the same way (a training snapshot against the trained model, two checkpoints of one model)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Protocol

import numpy as np
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import ABLATION_MODES, Head
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.ablation import every_head, head_site
from attention_atlas.model.registry import list_model_ids
from attention_atlas.ui.downloads import downloads, figure_label, matrix_table
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.page import current_request, trace_with
from attention_atlas.ui.pickers import head_label, keep_valid
from attention_atlas.ui.runs import PATTERNS, trace_for
from attention_atlas.ui.session_models import session_models
from attention_atlas.viz.masks import difference_figure

ANOTHER_MODEL = "Another model"
KINDS = ("Mask on vs off", "Another text", "Before vs after an ablation", ANOTHER_MODEL)
FOLDER = "folder"  # the other-model choice that opens a folder typed in
MODE_LABELS = {"zero": "by zero", "mean": "by their mean over the positions"}


class Shown(Protocol):
    """What the Attention page chose (its `Choice`): a trace, a head, the rows and columns drawn."""

    trace: Trace
    site: str
    layer: int
    head: int
    rows: np.ndarray
    cols: np.ndarray
    head_pattern: np.ndarray
    masked: np.ndarray
    queries: list[str]
    keys: list[str]
    where: str
    name: str

    def heatmap(self, matrix: np.ndarray, title: str, masked: np.ndarray): ...


def other_causal(trace: Trace, site: str) -> tuple[str, str, str]:
    """The other causal choice for a site's stack: (run option, how A reads, how B reads)."""
    causal_now = trace.options.causal_for(Site.of(site).stack)
    words = {True: "causal mask on", False: "causal mask off"}
    return ("off" if causal_now else "on"), words[causal_now], words[not causal_now]


def reads_own_output(trace: Trace) -> bool:
    """Whether the trace reads the output the model generated (toy models, encoder-decoders): a run under other
    masks or heads would write, and read, another one."""
    return trace.output_kind == "generated" and bool(trace.target_ids or trace.steps)


def same_input(c: Shown, **options) -> tuple[Trace, str] | None:
    """This run's input under other options, reading A's own output when A reads it (so that the positions line
    up); and what to add to B's label. None after showing why it failed."""
    if not reads_own_output(c.trace):
        return trace_with(PATTERNS, **options), ""
    try:
        other, _ = trace_for(replace(current_request(), target=c.trace.output_text), PATTERNS, **options)
    except UserError as error:
        show_error(str(error))
        return None
    return other, ", reads A's output"


def run_b(c: Shown, kind: str) -> tuple[Trace, str, str, str] | None:
    """The other run and how A and B read, plus a note; None (after saying why) when there is nothing to compare."""
    if kind == KINDS[0]:
        causal, a_label, b_label = other_causal(c.trace, c.site)
        made = same_input(c, causal=causal)
        return None if made is None else (made[0], a_label, b_label + made[1], "")
    if kind == KINDS[1]:
        text = st.text_input("Second text (the same number of tokens)", key="attention_compare_text")
        if not text.strip():
            st.info("Type a second text to compare the same head on it.", icon=":material/edit:")
            return None
        try:
            other, _ = trace_for(replace(current_request(), text=text), PATTERNS)
        except UserError as error:
            show_error(str(error))
            return None
        return other, "this text", "the second text", ""
    if kind == ANOTHER_MODEL:
        return another_model(c)
    heads, mode = choose_ablation(c.trace)
    if not heads:
        st.info("Choose heads to ablate.", icon=":material/content_cut:")
        return None
    later = [head for head in heads if head_site(head)[1] < c.layer or head_site(head)[0] != c.site]
    note = "" if later else ("No chosen head comes before this layer of this site: the pattern here is computed "
                             "before they act, so the difference is 0.")
    b_label = f"{len(heads)} head{'s' if len(heads) != 1 else ''} ablated"
    made = same_input(c, ablated=heads, ablation=mode)
    return None if made is None else (made[0], "every head whole", b_label + made[1], note)


def another_model(c: Shown) -> tuple[Trace, str, str, str] | None:
    """The same input read by another model (reading A's own output where A reads it), when it has the same tokens
    and the chosen head; None after saying why not."""
    request = current_request()
    others = [m for m in [*list_model_ids(), *session_models()] if m != request.model_id] + [FOLDER]
    keep_valid("attention_compare_model", others)
    other = st.selectbox("The other model", others, key="attention_compare_model",
                         format_func=lambda m: "a Hugging Face folder…" if m == FOLDER else m,
                         help="A model that splits the text into the same tokens: a snapshot of a training against "
                              "the trained model, or two checkpoints of one model.")
    if other == FOLDER:
        other = st.text_input("Folder", key="attention_compare_folder", placeholder="/path/to/checkpoint").strip()
        if not other:
            st.info("Type the folder of the other model.", icon=":material/folder_open:")
            return None
    reads_output = reads_own_output(c.trace)
    other_request = replace(request, model_id=other, target=c.trace.output_text if reads_output else request.target)
    try:
        trace, _ = trace_for(other_request, PATTERNS)
    except UserError as error:
        show_error(str(error))
        return None
    if (trace.tokens, trace.target_tokens) != (c.trace.tokens, c.trace.target_tokens):
        st.warning("The other model splits the text into other tokens: the same head cannot be compared position "
                   "by position. Choose a model with the same tokenizer.", icon=":material/compare_arrows:")
        return None
    if c.site not in trace.sites() or c.layer >= trace.n_layers(c.site) or c.head >= trace.facts.n_heads:
        st.warning(f"The other model has no {c.where} · head {c.head}.", icon=":material/compare_arrows:")
        return None
    return trace, request.model_id, other + (", reads A's output" if reads_output else ""), ""


def choose_ablation(trace: Trace) -> tuple[tuple[Head, ...], str]:
    heads = every_head(trace)
    kept = st.session_state.get("attention_compare_heads", [])
    st.session_state["attention_compare_heads"] = [head for head in kept if head in heads]
    left, right = st.columns([3, 2])
    label = partial(head_label, with_site=len(trace.masks) > 1)  # plain values only: the session keeps it
    chosen = left.multiselect("Heads to ablate", heads, format_func=label, key="attention_compare_heads")
    mode = right.radio("Replace their output", ABLATION_MODES, format_func=MODE_LABELS.get,
                       key="attention_compare_mode", horizontal=True)
    return tuple(chosen), mode


def show_compare(c: Shown) -> None:
    """A, B and B − A for the chosen head."""
    st.latex(r"\Delta = A^{(h)}_{B} - A^{(h)}_{A}")
    kind = st.radio("Compare this run with", KINDS, key="attention_compare_kind", horizontal=True)
    made = run_b(c, kind)
    if made is None:
        return
    other, a_label, b_label, note = made
    b = replace(c, trace=other)
    if b.trace.shape(b.trace.pattern_name(c.site, c.layer)) != c.trace.shape(c.trace.pattern_name(c.site, c.layer)):
        a_len, b_len = (len(t.query_tokens(c.site)) for t in (c.trace, other))
        st.warning(f"The two runs have different lengths ({a_len} and {b_len} tokens): a difference needs the "
                   "same number" + (". Change the second text." if kind == KINDS[1] else "."),
                   icon=":material/straighten:")
        return
    pattern_a, pattern_b = c.head_pattern, b.head_pattern  # (q_shown, k_shown) float32
    left, right = st.columns(2)
    for column, run, pattern, label, key in ((left, c, pattern_a, f"A · {a_label}", "attention_compare_a"),
                                             (right, b, pattern_b, f"B · {b_label}", "attention_compare_b")):
        side = run.heatmap(pattern, label, run.masked)
        column.plotly_chart(side, key=key, alt=figure_label(side, csv=False))
    difference = pattern_b - pattern_a  # (q_shown, k_shown)
    largest = float(np.abs(difference).max())
    st.caption(f"{c.where} · head {c.head}. A: {a_label}. B: {b_label}. Largest |B − A|: {largest:.4f}. Red: B "
               "attends more; blue: less." + (f" {note}" if note else ""))
    rows = [q if q == other_q else f"{q} | {other_q}" for q, other_q in zip(c.queries, b.queries, strict=True)]
    cols = [k if k == other_k else f"{k} | {other_k}" for k, other_k in zip(c.keys, b.keys, strict=True)]
    figure = difference_figure(difference, rows, cols, f"B − A · {c.where} · head {c.head}")
    st.plotly_chart(figure, key="attention_compare_difference", alt=figure_label(figure, csv=True))
    downloads(figure, f"{c.name}.{c.head}.compare", "attention_compare_difference",
              partial(matrix_table, difference, rows, cols, c.rows, c.cols))
