"""The Masks page's comparison of two runs of one head (mask on and off, a custom mask): side by side, their
difference, and for models that write text both outputs and next-token choices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.downloads import downloads, figure_label
from attention_atlas.ui.mask_views import heatmap, name
from attention_atlas.ui.messages import literal
from attention_atlas.ui.page import current_runner
from attention_atlas.viz.masks import difference_figure, next_token_comparison
from attention_atlas.viz.tokens import position_label

TOP = 8  # next tokens compared


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
        st.plotly_chart(figure, key="masks_next_tokens", alt=figure_label(figure, csv=False))
        downloads(figure, name(first, "next-token"), "masks_next_tokens")
