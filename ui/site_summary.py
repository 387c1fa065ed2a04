"""A trace's attention sites reduced in one pass (model/core/attention/summary.py): the model view's thumbnails, the
head statistics, the rollout, and the head the app opens on all read it. The frame's run of a Hugging Face model
computes it in the run, on the model's device (RunOptions.summarised); otherwise it is computed here once per
trace and site and kept with the trace in the server's cache. Either way its thumbnails have THUMBNAIL_SIZE pixels a
side; the model view shrinks them to its width (`attention_atlas.plot.attention.thumbnail_size`)."""

from __future__ import annotations

from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.trace_cache import per_trace


def site_summary(trace: Trace, site: str) -> SiteSummary:
    """Every layer of `site` reduced: made in the run, or here once."""
    made_in_run = trace.summaries.get(site)
    if made_in_run is not None:
        return made_in_run
    return per_trace(trace, ("summary", site), lambda: summarise_site(trace, site))
