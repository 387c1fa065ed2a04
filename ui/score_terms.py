"""Step through's scores taken apart where a model adds terms that depend on the tokens as well as on positions
(DeBERTa's content-to-position and position-to-content): each term from the model's own code, and their sum held to
the scores the model computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import streamlit as st

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.families import adapter_of
from attention_atlas.ui.matrix_view import show_matrix
from attention_atlas.ui.trace_cache import per_trace

TERM_NAMES = {"c2p": "content → position (the query against the distance's key-side embedding)",
              "p2c": "position → content (the key against the distance's query-side embedding)"}


def score_terms_view(runner: Runner, trace: Trace, layer: int, head: int, captured: Callable[[str], np.ndarray],
                     content: np.ndarray, labels: tuple[Sequence[str], Sequence[str]], values: bool, stem: str) -> None:
    """The head's scores taken apart at `layer` of `trace` (the page's own run, whose attention hooks `captured`
    reads by name: hook_q, hook_k, hook_attn_scores); content: (q_len, k_len) its Q Kᵀ x the scale. Nothing where
    the model adds no such terms."""
    model = getattr(runner, "model", None)
    adapter = None if model is None else adapter_of(model.config.model_type)
    if adapter is None or not adapter.adds_score_terms:
        return
    terms = dict(per_trace(trace, ("score terms", layer), lambda: tuple(adapter.score_terms(
        model, layer, captured("hook_q"), captured("hook_k")).items())))  # name -> (heads, q_len, k_len)
    if not terms:
        return
    st.markdown("**The scores' other terms.** Besides content against content (Q Kᵀ, scaled), this model adds "
                f"{len(terms)} term{'s' if len(terms) > 1 else ''} of the tokens with an embedding of their distance, "
                "computed here by its own code:")
    axes = ("query tokens", "key tokens")
    show_matrix(content, *labels, "content → content: Q Kᵀ × scale", axes, "step_term_c2c", show_values=values,
                stem=stem)
    for kind, term in terms.items():
        show_matrix(term[head], *labels, TERM_NAMES.get(kind, kind), axes, f"step_term_{kind}", show_values=values,
                    stem=stem)
    total = content + sum(term[head] for term in terms.values())
    difference = float(np.abs(total - captured("hook_attn_scores")[head]).max())
    st.caption(f"Their sum against the model's scores S: largest difference {difference:.2e}.")
