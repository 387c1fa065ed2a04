"""A trace's attention sites summarised after its run (`SiteSummariser`), where the run did not make the summary:
from the patterns' kept sources, or from the toy models' patterns, captured whole."""

from __future__ import annotations

from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.summary import THUMBNAIL_SIZE, SiteSummariser, SiteSummary
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace


def summarise_site(trace: Trace, site: str, size: int = THUMBNAIL_SIZE) -> SiteSummary:
    """Every layer of `site` in `trace` reduced (thumbnails `size` a side), one block of query rows at a time."""
    summariser = SiteSummariser(trace.shape(trace.pattern_name(site, 0)), size, not Site.of(site).is_cross)
    scratch = Scratch()  # every layer's blocks computed in the same memory
    for layer in range(trace.n_layers(site)):
        source = trace.pattern_source(site, layer)
        if source is not None:
            summariser.add_layer(source.reduced_rows(summariser.layout, scratch=scratch))
        else:
            summariser.add_probabilities(trace.pattern_blocks(site, layer))
    return summariser.result()
