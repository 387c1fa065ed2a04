"""The Attribution page for a model on NDIF: its activation patching (ui/patching_views.py), whose runs and gradients
NDIF makes (model/ndif/patches.py), read after the text's last token; the answers' defaults are the run's own two
likeliest next tokens, which NDIF sent back (the local page reads them through the unembedding, whose weights stay on
NDIF)."""

from __future__ import annotations

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import token_text
from attention_atlas.ui.patching_views import answer_boxes, patching_section


def ndif_patching(runner: Runner, shown: Trace) -> None:
    """The answer and the wrong answer (the same boxes as the local page's), then the patching section."""
    (first, second), (p_first, p_second) = shown.outputs["top_next_ids"][:2], shown.outputs["top_next_probs"][:2]
    answer, wrong = answer_boxes((token_text(runner, int(first)), float(p_first)),
                                 (token_text(runner, int(second)), float(p_second)), no_wrong=False)
    patching_section(runner, shown, answer, wrong, -1)
