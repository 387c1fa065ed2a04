"""Step through's scores taken apart where a model adds terms that depend on the tokens as well as on positions
(DeBERTa's content-to-position and position-to-content): each term from the model's own code, and their sum held to
the scores the model computed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.hf.families import adapter_of
from attention_atlas.ui.matrix_view import show_matrix

TERM_NAMES = {"c2p": "content → position (the query against the distance's key-side embedding)",
              "p2c": "position → content (the key against the distance's query-side embedding)"}


def score_terms_view(runner: Runner, layer: int, head: int, queries: np.ndarray, keys: np.ndarray,
                     content: np.ndarray, scores: np.ndarray, labels: tuple[Sequence[str], Sequence[str]],
                     values: bool, stem: str) -> None:
    """queries, keys: (heads, len, d_head), the layer's; content: (q_len, k_len) Q Kᵀ x the scale, the head's;
    scores: (q_len, k_len) the scores the model computed. Nothing where the model adds no such terms."""
    model = getattr(runner, "model", None)
    terms = {} if model is None else adapter_of(model.config.model_type).score_terms(model, layer, queries, keys)
    if not terms:
        return
    st.markdown("**The scores' other terms.** Besides content against content (Q Kᵀ, scaled), this model adds "
                f"{len(terms)} terms of the tokens with an embedding of their distance, computed here by its own code:")
    axes = ("query tokens", "key tokens")
    show_matrix(content, *labels, "content → content: Q Kᵀ × scale", axes, "step_term_c2c", show_values=values,
                stem=stem)
    for kind, term in terms.items():
        show_matrix(term[head], *labels, TERM_NAMES.get(kind, kind), axes, f"step_term_{kind}", show_values=values,
                    stem=stem)
    total = content + sum(term[head] for term in terms.values())
    st.caption(f"Their sum against the model's scores S: largest difference {float(np.abs(total - scores).max()):.2e}.")
