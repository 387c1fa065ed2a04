"""Ablate heads: replace the outputs of chosen heads (by 0, or by their mean over the positions), see what the
model concludes before and after, and scan every head to rank them by the change their ablation alone makes.
The shared model is never changed: the ablation applies to this session's runs only (model/core/capture/ablation.py)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.capture.ablation import Outcome
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import ABLATION_MODES, AblationMode, Head
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.ablation import (
    MAX_SCAN_WORK,
    HeadScan,
    change_name,
    every_head,
    per_position_change,
    scan_heads,
    scan_work,
)
from attention_atlas.model.inspect.readout import spell_for
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.page import current_request, current_runner, current_trace, trace_with
from attention_atlas.ui.pickers import head_label
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.runs import readable_failures
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.ablation import change_bars, scan_heatmap
from attention_atlas.viz.masks import next_token_comparison
from attention_atlas.viz.tokens import visible_token

MODE_LABELS = {"zero": "zero (the head adds nothing)", "mean": "its mean over the positions"}
SCAN = "ablation_scan"  # session key: (request, mode, HeadScan) of the last scan
TOP_K = 10
SCAN_PICKS = 3  # heads the "ablate the top heads" button chooses


EVERY_HEAD = {"zero": "attention then adds only W_O's bias, the same to every token",
              "mean": "each head adds its average output to every token, whichever tokens it would have read"}


def choose(trace: Trace) -> tuple[tuple[Head, ...], AblationMode]:
    """The heads to ablate and how, from the widgets (choices the model lacks are let go)."""
    heads = every_head(trace)
    kept = st.session_state.get("ablation_heads", [])
    st.session_state["ablation_heads"] = [head for head in kept if head in heads]
    left, right = st.columns([3, 2])
    every = right.toggle("Every head", key="ablation_every", help="Ablate all the model's heads at once.")
    label = partial(head_label, with_site=len(trace.masks) > 1, words=trace.facts.layer_words)  # no trace: the
    # session keeps format_func
    chosen = left.multiselect("Heads to ablate", heads, format_func=label, key="ablation_heads",
                              disabled=every, placeholder="Choose heads, or scan every head below")
    mode = right.radio("Replace each head's output by", ABLATION_MODES, format_func=MODE_LABELS.get,
                       key="ablation_mode", horizontal=True)
    return (tuple(heads) if every else tuple(chosen)), mode


def outcomes(trace: Trace, heads: tuple[Head, ...], mode: AblationMode) -> Outcome:
    """Rows 0 and 1: the model whole and with `heads` ablated, on the trace's input (kept with the trace)."""
    runner = current_runner()

    def compute() -> Outcome:
        with run_slots():
            return runner.ablation_outcomes(trace, [(), heads], mode)

    return per_trace(trace, ("ablation", heads, mode), compute)


def position_tokens(trace: Trace, outcome: Outcome) -> list[str]:
    """The token read at each of the outcome's positions (an encoder-decoder's: its output as read)."""
    tokens = trace.target_tokens if trace.facts.kind == "encoder-decoder" else trace.tokens
    return [tokens[p] for p in outcome.positions]


def top_next(log_probs: np.ndarray, spell) -> tuple[list[str], np.ndarray]:
    """The TOP_K likeliest tokens of one distribution (vocab,) of log-probabilities, with their probabilities."""
    top = np.argsort(-log_probs)[:TOP_K]
    return spell(top.tolist()), np.exp(log_probs[top].astype(np.float64))


def replaced(count: int, mode: AblationMode) -> str:
    """What became of `count` heads, in words: "3 heads replaced by zero (they add nothing)"."""
    if count == 1:
        return f"1 head replaced by {MODE_LABELS[mode]}"
    return {"zero": f"{count} heads replaced by zero (they add nothing)",
            "mean": f"{count} heads, each replaced by its mean over the positions"}[mode]


def show_change(trace: Trace, heads: tuple[Head, ...], mode: AblationMode) -> None:
    """Before and after: the measure, the next-token choices or each position's change, and the output."""
    outcome = outcomes(trace, heads, mode)
    change = per_position_change(outcome, 0, 1)  # (positions,)
    measure = change_name(outcome)
    every = f" (every head: {EVERY_HEAD[mode]})" if len(heads) == len(every_head(trace)) else ""
    st.metric(f"{measure}, {'mean over the positions' if len(change) > 1 else 'next token'}", f"{change.mean():.4f}")
    st.caption(f"{replaced(len(heads), mode)}{every}.")
    name = file_name(trace.facts.model_id, "ablation", mode)
    if outcome.kind == "distributions" and len(change) == 1:
        spell = spell_for(current_runner())
        before, after = top_next(outcome.values[0, 0], spell), top_next(outcome.values[1, 0], spell)
        figure = next_token_comparison({"before": before, "after": after}, "Next token: the 10 likeliest, before "
                                       "and after")
        st.plotly_chart(figure, key="ablation_next", alt=figure_label(figure, csv=True))
        table = pd.DataFrame({"before": [visible_token(t) for t in before[0]], "p before": before[1],
                              "after": [visible_token(t) for t in after[0]], "p after": after[1]})
    else:
        tokens = position_tokens(trace, outcome)
        what = "each next-token distribution" if outcome.kind == "distributions" else "each token's last-layer vector"
        values = change if outcome.kind == "distributions" else 1.0 - change
        axis = measure if outcome.kind == "distributions" else "cosine similarity"
        figure = change_bars(tokens, values, f"How {what} changed", axis)
        if outcome.kind == "distributions":
            st.caption("A bar per position: how far the distribution of the token after it moved. Both runs read "
                       "the output the whole model wrote, so the positions line up.")
        st.plotly_chart(figure, key="ablation_positions", alt=figure_label(figure, csv=True))
        table = pd.DataFrame({"token": [visible_token(t) for t in tokens], axis: values},
                             index=pd.Index(outcome.positions, name="position"))
    downloads(figure, name, "ablation_change", constant(table))
    if trace.output_kind in ("generated", "next token"):  # what the model writes (a given target reads the same)
        ablated = trace_with((), ablated=heads, ablation=mode)
        before_col, after_col = st.columns(2)
        before_col.markdown(f"**{trace.output_kind.capitalize()}, before**")
        before_col.text(trace.output_text or "(nothing)")
        after_col.markdown(f"**{ablated.output_kind.capitalize()}, after**")
        after_col.text(ablated.output_text or "(nothing)")


def choose_heads(heads: list[Head]) -> None:
    """A button's callback: ablate these heads (before the widgets are drawn)."""
    st.session_state["ablation_heads"] = list(heads)
    st.session_state["ablation_every"] = False


def scan_section(trace: Trace, mode: AblationMode) -> None:
    """A button that ablates each head alone, with a progress bar, and the result: a grid per site and a ranking."""
    st.subheader("Scan every head")
    heads = every_head(trace)
    work = scan_work(trace)
    st.caption(f"Ablates each of the {len(heads)} heads alone, by {MODE_LABELS[mode]}, and measures the change, "
               "several heads side by side in each batch.")
    if work > MAX_SCAN_WORK:
        st.info(f"A scan of this text would read {work:,} token-heads; the limit here is {MAX_SCAN_WORK:,}. "
                "Shorten the text to scan.", icon=":material/timer:")
        return
    request = current_request()
    if st.button(f"Scan every head ({len(heads)})", key="ablation_scan_button"):
        bar = st.progress(0.0, text="Scanning…")
        runner = current_runner()
        def progress(done: int, total: int) -> None:
            bar.progress(done / total, text=f"{done} of {total} heads")

        try:  # a run slot a batch: other sessions' runs take turns between them
            scan = readable_failures("Scanning the heads",
                                     lambda: scan_heads(runner, trace, mode, progress, slot=run_slots))
        except UserError as error:
            show_error(str(error))
            return
        bar.empty()
        st.session_state[SCAN] = (request, mode, scan)
    stored = st.session_state.get(SCAN)
    if stored is None or stored[:2] != (request, mode):
        return
    show_scan(trace, stored[2])


def show_scan(trace: Trace, scan: HeadScan) -> None:
    ranked = scan.ranked()
    top = [head for head, _ in ranked[:SCAN_PICKS]]
    st.button(f"Ablate the top {SCAN_PICKS} heads", key="ablation_pick_top", on_click=choose_heads, args=(top,))
    for site, effects in scan.effects.items():
        names = [trace.facts.layer_words(i) for i in range(len(effects))]  # a hybrid's true layer numbers
        figure = scan_heatmap(effects, f"{Site.of(site).label}: the change each head's ablation makes", scan.measure,
                              names)
        st.plotly_chart(figure, key=f"ablation_scan_{site}", alt=figure_label(figure, csv=True))
        table = pd.DataFrame(effects, index=pd.Index([trace.facts.layer_choice(i) for i in range(len(effects))],
                                                     name="layer"))
        downloads(figure, file_name(trace.facts.model_id, "scan", site, scan.mode), f"ablation_scan_{site}",
                  constant(table))
    st.dataframe(pd.DataFrame({"head": [head_label(head, words=trace.facts.layer_words) for head, _ in ranked[:TOP_K]],
                               scan.measure: [value for _, value in ranked[:TOP_K]]}), hide_index=True)


def page() -> None:
    st.header("Ablate heads")
    trace = current_trace()
    st.caption("Ablating a head replaces its output (pattern × V, before W_O) at every position, in this session's "
               "runs only: the model others use stays whole. Later layers read the changed stream.")
    heads, mode = choose(trace)
    if heads:
        show_change(trace, heads, mode)
    else:
        st.info("Choose heads to ablate, or scan every head to find those that matter.", icon=":material/info:")
    scan_section(trace, mode)


page()
