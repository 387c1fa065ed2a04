"""A trace's attention sites reduced in one pass (model/core/attention/summary.py): the model view's thumbnails, the
head statistics, the rollout, and the head the app opens on all read it. The frame's run of a Hugging Face model
computes it in the run, on the model's device (RunOptions.summarised); otherwise it is computed here once per
trace and site and kept with the trace in the server's cache. Either way its thumbnails have THUMBNAIL_SIZE pixels a
side; the model view shrinks them to its width (`thumbnail_size`)."""

from __future__ import annotations

from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.trace_cache import per_trace

MODEL_VIEW_WIDTH = 900  # pixels the model view's thumbnails share across a row of heads


def thumbnail_size(heads: int) -> int:
    """Pixels per head in the model view: the heads of a layer share MODEL_VIEW_WIDTH (SmolLM2's 9: 64 px)."""
    return max(32, min(64, MODEL_VIEW_WIDTH // heads))


def site_summary(trace: Trace, site: str) -> SiteSummary:
    """Every layer of `site` reduced: made in the run, or here once."""
    made_in_run = trace.summaries.get(site)
    if made_in_run is not None:
        return made_in_run
    return per_trace(trace, ("summary", site), lambda: summarise_site(trace, site))
