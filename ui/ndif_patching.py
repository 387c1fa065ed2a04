"""The Attribution page for a model on NDIF: its activation patching (ui/patching_views.py), whose runs and gradients
NDIF makes (model/ndif/patches.py), read after the text's last token; the answers' defaults are the run's own two
likeliest next tokens, which NDIF sent back (the local page reads them through the unembedding, whose weights stay on
NDIF)."""

from __future__ import annotations

import streamlit as st

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import token_text
from attention_atlas.ui.patching_views import patching_section


def ndif_patching(runner: Runner, shown: Trace) -> None:
    """The answer and the wrong answer (the same boxes as the local page's), then the patching section."""
    first, second = (token_text(runner, int(token)) for token in shown.outputs["top_next_ids"][:2])
    p_first, p_second = shown.outputs["top_next_probs"][:2]
    left, right = st.columns(2)
    answer = left.text_input("Answer (one token)", key="attribution_answer",
                             placeholder=f"{first!r}: the likeliest ({p_first:.1%})",
                             help="Usually with its leading space: ' Mary'. Empty: the model's likeliest token.")
    wrong = right.text_input("Wrong answer (one token)", key="attribution_wrong",
                             placeholder=f"{second!r}: the second likeliest ({p_second:.1%})",
                             help="Its logit is subtracted: what tells the answer apart from it. Empty: the "
                                  "second likeliest token.")
    patching_section(runner, shown, answer or first, wrong or second, -1)
