"""The Masks page's figures from a trace: a site's mask, each hidden cell tinted by what hides it (the causal mask, a
sliding window, padding, a custom mask), its first DRAWN rows and columns, as the page draws them side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.plot.common import check_index, check_site
from attention_atlas.viz.heatmap import attention_heatmap
from attention_atlas.viz.masks import hidden_counts, hidden_reasons, mask_figure

DRAWN = 96  # the most rows and columns drawn (three figures side by side); the page's CSVs hold everything


def first_self_site(trace: Trace) -> str:
    """The self-attention that padding and blocked pairs apply to: the encoder's, or a decoder-only model's."""
    return "decoder.attn" if trace.facts.kind == "decoder" else "encoder.attn"


def hiding(trace: Trace, site: str) -> tuple[bool, tuple[tuple[int, int], ...]]:
    """(whether the causal mask hides keys at `site`, the blocked pairs that apply to it)."""
    s = Site.of(site)
    blocked = trace.options.blocked if site == first_self_site(trace) else ()
    return not s.is_cross and trace.options.causal_for(s.stack), tuple(blocked)


def layer_mask(trace: Trace, site: str, layer: int | None) -> tuple[int, int, np.ndarray]:
    """(the layer's sliding window, 0 for none; its chunk, 0 for none; the mask (q_len, k_len) bool its attention
    read): the site's mask, and in a sliding-window layer only the keys less than the window away (back, with a
    causal mask), in a chunked layer (Llama 4) only the keys of the query's own chunk."""
    self_attention = not Site.of(site).is_cross and layer is not None
    window = trace.facts.windows[layer] if self_attention and trace.facts.windows else 0
    chunk = trace.facts.chunks[layer] if self_attention and trace.facts.chunks else 0
    visible = trace.masks[site]
    positions = np.arange(visible.shape[0]), np.arange(visible.shape[1])
    if window:
        visible = visible & (np.abs(np.subtract.outer(*positions)) < window)  # |query - key|
    if chunk:
        visible = visible & np.equal.outer(positions[0] // chunk, positions[1] // chunk)
    return window, chunk, visible


def corner_figure(matrix: np.ndarray, trace: Trace, site: str, title: str,
                  draw: Callable[..., go.Figure] = attention_heatmap, **options: Any) -> go.Figure:
    """A (q_len, k_len) matrix of `trace` at `site`, its first DRAWN rows and columns, 420 px high; `draw` makes the
    figure (as `attention_heatmap`), `options` go to it (a `masked` (q_len, k_len) array is cut to the corner too)."""
    queries, keys = trace.query_tokens(site), trace.key_tokens(site)
    n_q, n_k = min(len(queries), DRAWN), min(len(keys), DRAWN)
    masked = options.pop("masked", None)
    return draw(matrix[:n_q, :n_k], queries[:n_q], keys[:n_k], title, height=420,
                **({"masked": masked[:n_q, :n_k]} if masked is not None else {}), **options)


@dataclass(frozen=True)
class SiteMask:
    """The mask one site's attention read in a run (a sliding layer's with its window, a chunked layer's with its
    chunks), and what hides its cells."""

    site: str
    layer: int | None  # the layer whose window it includes (None: the site's mask alone)
    window: int  # that layer's sliding window, 0 for none
    chunk: int  # that layer's chunk (Llama 4), 0 for none
    visible: np.ndarray  # (q_len, k_len) bool, True = may attend
    causal: bool  # whether the causal mask hides keys here
    blocked: tuple[tuple[int, int], ...]  # the custom mask's (query, key) pairs that apply here
    layer_name: str = ""  # how the page names that layer (ModelFacts.layer_words: a hybrid's true layer number)

    @classmethod
    def of(cls, trace: Trace, site: str, layer: int | None = None) -> SiteMask:
        window, chunk, visible = layer_mask(trace, site, layer)
        named = "" if layer is None else trace.facts.layer_words(layer)
        return cls(site, layer, window, chunk, visible, *hiding(trace, site), named)

    @property
    def title(self) -> str:
        label = f"mask · {Site.of(self.site).label}"
        if self.window or self.chunk:
            label += f" · {self.layer_name} (" + " and ".join(
                [*([f"a window of {self.window}"] if self.window else []),
                 *([f"chunks of {self.chunk}"] if self.chunk else [])]) + ")"
        return label

    def counts(self) -> dict[str, int]:
        """Hidden cells by what hides them (`hidden_counts`)."""
        return hidden_counts(self.visible, self.causal, self.blocked, self.window, chunk=self.chunk)

    def figure(self, trace: Trace) -> go.Figure:
        """Its first DRAWN rows and columns: visible cells blue, hidden ones hatched and tinted by their reason."""

        def draw(matrix: np.ndarray, *labels: Any, **options: Any) -> go.Figure:  # the drawn corner of the mask
            reasons = hidden_reasons(matrix, self.causal, self.blocked, self.window, self.chunk)
            return mask_figure(matrix, reasons, *labels, **options)

        return corner_figure(self.visible, trace, self.site, self.title, draw=draw)


def masks(trace: Trace, site: str | None = None, *, layer: int | None = None) -> go.Figure:
    """The mask a site's attention read in this run (q_len, k_len), as the Masks page's "Masks of this run" tab draws
    it: blue where a query may attend to a key, hidden cells hatched and tinted by what hides them; its first 96 rows
    and columns. site: one of `trace.masks` (default: the first); layer: a layer of a model with sliding windows,
    whose mask then includes the window."""
    site = check_site(trace, site, list(trace.masks))
    if layer is not None:
        layer = check_index(layer, trace.n_layers(site), "layer")
    return SiteMask.of(trace, site, layer).figure(trace)
