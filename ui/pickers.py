"""The site / layer / head pickers shared by the pages, and opening a head from a clicked thumbnail.

The chosen site, layer and head are one choice for the whole app (keys `site`, `layer`, `head`), so a
head chosen on one page is the head the next page opens on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import streamlit as st

from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.model.core.options import Head
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.ablation import head_site
from attention_atlas.plot.common import site_label as plot_site_label
from attention_atlas.ui import url_state
from attention_atlas.ui.page import HEAD_KEYS, forget_choices
from attention_atlas.ui.role_views import clearest_head
from attention_atlas.ui.site_summary import site_summary
from attention_atlas.viz.thumbnails import head_at

SHORT_SITES = {"encoder.attn": "encoder", "decoder.attn": "decoder", "decoder.cross_attn": "cross"}


def site_label(trace: Trace, site: str) -> str:
    """The site's name, with "(masked)" when a mask of this run hides some key from some query (as the figures of
    attention_atlas.plot name it)."""
    return plot_site_label(trace, site)


def head_label(head: Head, with_site: bool = True, words: Callable[[int], str] | None = None) -> str:
    """("decoder.3.cross_attn", 2) -> "cross · layer 3 · head 2" ("layer 3 · head 2" without its site); `words`
    names a decoder layer (ModelFacts.layer_words: a hybrid's true layer number)."""
    site, layer = head_site(head)
    named = words(layer) if words is not None and site == "decoder.attn" else f"layer {layer}"
    return f"{SHORT_SITES[site] + ' · ' if with_site else ''}{named} · head {head[1]}"


def keep_valid(key: str, options: Sequence[Any]) -> None:
    """A value from the URL or from another model may not fit this one: fall back to the first choice."""
    if key in st.session_state and st.session_state[key] not in options:
        st.session_state[key] = options[0]


def opening_head(trace: Trace) -> tuple[str, int, int, float, str]:
    """Where to open: the first self-attention site's clearest head by its role (ui/role_views.py: the strongest
    induction head, else previous-token head), else the head that attends most to the previous token; its share,
    and its role ("" where no head has one of those roles)."""
    site = next(s for s in trace.sites() if not Site.of(s).is_cross)
    shares = site_summary(trace, site).statistics[:, :, STATISTICS.index("to previous token")]  # (layers, heads)
    shares = np.nan_to_num(shares)  # one token: no previous one
    clearest = clearest_head(trace, site)
    if clearest is not None:  # an induction head's share on its targets; a previous-token head's over every query
        layer, head, role, share = clearest
        return site, layer, head, share if role == "induction" else float(shares[layer, head]), role
    layer, head = np.unravel_index(int(shares.argmax()), shares.shape)
    return site, int(layer), int(head), float(shares[layer, head]), ""


def forget_head() -> None:
    """A new model: the next `choose_head` opens on that model's own opening head."""
    forget_choices(*HEAD_KEYS)


def choose_head(trace: Trace) -> tuple[str, int, int]:
    """Site, layer and head pickers; the choice goes into the URL. Where nothing is chosen yet (by the person,
    or by a link), they open on `opening_head`."""
    if not any(key in st.session_state for key in HEAD_KEYS):
        st.session_state.update(dict(zip(HEAD_KEYS, opening_head(trace)[:3], strict=True)))
    sites = trace.sites()
    keep_valid("site", sites)
    col_site, col_layer, col_head = st.columns([2, 1, 1], vertical_alignment="bottom")
    labels = {s: site_label(trace, s) for s in sites}  # not a function of `trace`: the session keeps format_func
    site = col_site.radio("Attention", sites, key="site", horizontal=True, format_func=labels.__getitem__,
                          help="Which attention to look at: a stack's self-attention, or the decoder's "
                               "cross-attention to the encoder's output.")
    layers, heads = list(range(trace.n_layers(site))), list(range(trace.facts.n_heads))
    keep_valid("layer", layers)
    keep_valid("head", heads)
    names = {i: trace.facts.layer_choice(i) for i in layers}  # not a function of `trace`: the session keeps it
    layer = col_layer.selectbox("Layer", layers, key="layer", format_func=names.__getitem__)
    head = col_head.selectbox("Head", heads, key="head")
    url_state.write(site=site, layer=layer, head=head)
    return site, layer, head


def clicked_head(chart_key: str, heads: int) -> tuple[int, int] | None:
    """The (layer, head) of the thumbnail of the chart `chart_key` (`thumbnail_figure`) clicked since the last run,
    or None. Call before the widgets it changes are drawn (a widget's state cannot change once it is drawn)."""
    event = st.session_state.get(chart_key)
    points = [p for p in event.selection.points if p.get("curve_number") == 1] if event else []  # the markers
    seen_key = f"{chart_key}_seen"
    if points == st.session_state.get(seen_key, []):
        return None  # nothing new: the pickers may have moved on since
    st.session_state[seen_key] = points
    return head_at(points[0]["point_index"], heads) if points else None


def open_clicked_head(chart_key: str, heads: int, *, set_layer: bool = True) -> bool:
    """If a thumbnail of the chart `chart_key` was clicked since the last run, make its head the chosen
    one and say so. Call before `choose_head`."""
    clicked = clicked_head(chart_key, heads)
    if clicked is None:
        return False
    if set_layer:
        st.session_state["layer"] = clicked[0]
    st.session_state["head"] = clicked[1]
    return True
