"""A trace's attention sites summarised after its run (`SiteSummariser`), where the run did not make the summary:
from the patterns' kept sources, or from the toy models' patterns, captured whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np
import torch

from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.attention.summary import THUMBNAIL_SIZE, SiteSummariser, SiteSummary
from attention_atlas.model.core.trace.sites import Site


class Patterns(Protocol):
    """What a summary reads of a trace (model/core/trace/trace.py's Trace, which summarises through this module)."""

    def shape(self, name: str) -> tuple[int, ...]: ...
    def pattern_name(self, site: str, layer: int) -> str: ...
    def n_layers(self, site: str) -> int: ...
    def pattern_source(self, site: str, layer: int) -> PatternSource | None: ...
    def pattern_blocks(self, site: str, layer: int) -> Iterator[tuple[np.ndarray, torch.Tensor]]: ...
    def query_ids(self, site: str) -> list[int]: ...


def summarise_site(trace: Patterns, site: str, size: int = THUMBNAIL_SIZE) -> SiteSummary:
    """Every layer of `site` in `trace` reduced (thumbnails `size` a side), one block of query rows at a time; the
    induction share from the site's query ids (self-attention)."""
    shape = trace.shape(trace.pattern_name(site, 0))
    summariser = SiteSummariser(shape, size, not Site.of(site).is_cross, trace.query_ids(site))
    scratch = Scratch()  # every layer's blocks computed in the same memory
    for layer in range(trace.n_layers(site)):
        source = trace.pattern_source(site, layer)
        if source is not None:
            summariser.add_layer(source.reduced_rows(summariser.layout, scratch=scratch))
        else:
            summariser.add_probabilities(trace.pattern_blocks(site, layer))
    return summariser.result()
