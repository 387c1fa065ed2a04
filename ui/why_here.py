""""Why here?": one head's score from a query to a key (or its whole row) taken apart into what each earlier part of
the model wrote, on the query side and on the key side (model/inspect/score_parts.py), drawn under the head on the
Attention page's One head view and in Step through. The cell opens on the query's brightest key; a click on a cell of
the head's heatmap (`clicked_cell`) or the number boxes choose another. The parts need the model's weights and a run
that records the stream: computed on demand, once per trace and cell."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.score_parts import PatternParts, ScoreParts, explain_pattern, explain_score
from attention_atlas.model.inspect.score_setup import score_options
from attention_atlas.model.inspect.score_words import head_words, row_sentence, score_sentence
from attention_atlas.plot.explain import pairs_matrix, row_matrix, sides_bars
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import downloads, figure_label
from attention_atlas.ui.page import current_request, trace_with
from attention_atlas.ui.runs import runner_of
from attention_atlas.ui.site_summary import site_summary
from attention_atlas.ui.trace_cache import per_trace


@dataclass(frozen=True)
class Kept:
    """Parts kept with their trace (ui.trace_cache counts what it keeps): their arrays' bytes, and their names' and
    tokens' about."""

    parts: ScoreParts | PatternParts

    @property
    def nbytes(self) -> int:
        values = vars(self.parts).values()
        words = sum(len(v) for v in values if isinstance(v, list))
        return sum(v.nbytes for v in values if isinstance(v, np.ndarray)) + 64 * words


HEAD_PART = re.compile(r"^L(\d+)H(\d+)$")  # a part that is one head ("L0H3"), not the encoder's or an MLP
WHY_VIEWS = {"cell": "one cell", "row": "the whole row"}  # the view's value (and the link's `why`) -> its label


def why_here(trace: Trace, site: str, layer: int, head: int, prefix: str) -> None:
    """The section for `head` of `layer` at `site` of `trace`; `prefix` keys its charts ("attention", "step"); the
    cell chosen (`why_query`, `why_key`, `why_view`) is one choice for both pages, like the head."""
    opened = st.toggle("Why here? Take this head's scores apart", key="why_open",
                       help="Runs the text again recording the stream, and splits the chosen score into parts.")
    url_state.write(why_open=opened or None)
    if not opened:
        return
    st.caption("A score is q_i · k_j × scale, and with every norm's scale frozen at this run's, q_i and k_j are sums "
               "of what each earlier part of the model wrote into the stream: the embeddings, each earlier head, "
               "each MLP, the biases. The query side shares each part's q_i · the whole k_j; the key side, the whole "
               "q_i · each part's k_j. Each side adds up to the score the model used.")
    try:
        runner = runner_of(current_request())
    except UserError as error:
        st.info(f"{error} The parts need the model's weights.", icon=":material/info:")
        return
    if not getattr(runner, "weights_here", True):
        st.info("The parts are read through the model's own weights, which stay on NDIF with the model: not shown "
                "for a model run there.", icon=":material/cloud:")
        return
    n_q, n_k = len(trace.query_tokens(site)), len(trace.key_tokens(site))
    query_col, key_col, view_col = st.columns(3)
    with query_col:
        query = _position("why_query", "Query position", n_q, n_q - 1)
    row = trace.head_pattern(site, layer, head, np.array([query]))[0]  # (k_len,)
    with key_col:
        key = _position("why_key", "Key position", n_k, int(np.argmax(row)))
    if st.session_state.get("why_view") not in WHY_VIEWS:
        st.session_state["why_view"] = "cell"
    view = view_col.segmented_control("Explain", list(WHY_VIEWS), key="why_view", format_func=WHY_VIEWS.get) or "cell"
    url_state.write(why_query=query, why_key=key, why=None if view == "cell" else view)
    scored = trace_with(score_options(runner, site, layer).hooks)
    roles = dict(per_trace(trace, ("why roles", site),
                           lambda: tuple(head_words(site_summary(trace, site).statistics).items())))
    whole_row = view == "row"
    try:
        with st.spinner("Taking the scores apart…"):
            parts = per_trace(scored, ("why", site, layer, head, query, None if whole_row else key), lambda: Kept(
                explain_pattern(runner, scored, site, layer, head, query) if whole_row else
                explain_score(runner, scored, site, layer, head, query, key))).parts
    except UserError as error:
        st.info(str(error), icon=":material/info:")
        return
    if isinstance(parts, PatternParts):
        show_row(parts, roles, prefix)
    else:
        show_cell(parts, roles, prefix)


def show_cell(parts: ScoreParts, roles: dict[str, str], prefix: str) -> None:
    st.markdown(score_sentence(parts, roles))
    bias = f" + {parts.position_bias_name} {parts.position_bias:+.4g}" if parts.position_bias_name else ""
    st.caption(f"Query side: {parts.query_shares.sum():+.4g}{bias}; key side: {parts.key_shares.sum():+.4g}{bias}; "
               f"the model's score: {parts.score:+.4g} (scale {parts.scale_text}), weight {parts.probability:.3f}."
               + (f" The model then caps it to c·tanh(score / c), c = {parts.softcap:g}." if parts.softcap else ""))
    figure = sides_bars(parts)
    st.plotly_chart(figure, key=f"{prefix}_why_sides", selection_mode="points",
                    on_select=partial(open_clicked_part, f"{prefix}_why_sides"), alt=figure_label(figure, csv=False))
    st.caption("Click a head's bar to open that head.")
    name = f"{parts.site}.{parts.layer}.{parts.head}.q{parts.query}k{parts.key}"
    downloads(figure, f"{name}.why", f"{prefix}_why_sides_files")
    pairs = pairs_matrix(parts)
    st.plotly_chart(pairs, key=f"{prefix}_why_pairs", alt=figure_label(pairs, csv=False))
    downloads(pairs, f"{name}.why-pairs", f"{prefix}_why_pairs_files")


def show_row(parts: PatternParts, roles: dict[str, str], prefix: str) -> None:
    st.markdown(row_sentence(parts, roles))
    figure = row_matrix(parts)
    st.plotly_chart(figure, key=f"{prefix}_why_row", alt=figure_label(figure, csv=False))
    downloads(figure, f"{parts.site}.{parts.layer}.{parts.head}.q{parts.query}.why-row", f"{prefix}_why_row_files")


def clicked_cell(chart_key: str, queries: np.ndarray, keys: np.ndarray) -> None:
    """A click on a cell of the head's heatmap (`clickable_cells` over it, drawn with this key): open "Why here?" on
    that cell. The chart's on_select callback: it runs before the widgets it sets are drawn."""
    event = st.session_state.get(chart_key)
    points = [p for p in event.selection.points if p.get("curve_number", 0) > 0] if event else []
    if points:
        row, col = divmod(int(points[0]["point_index"]), len(keys))
        st.session_state.update(why_open=True, why_view="cell", why_query=int(queries[row]), why_key=int(keys[col]))


def open_clicked_part(chart_key: str) -> None:
    """A click on a head's bar (`L1H2`) of the sides chart drawn with this key opens that head (the same site's
    layer and head pickers); a bar of another part opens nothing. The chart's on_select callback."""
    event = st.session_state.get(chart_key)
    points = event.selection.points if event else []
    head = HEAD_PART.match(str(points[0].get("y", ""))) if points else None
    if head:
        st.session_state.update(layer=int(head.group(1)), head=int(head.group(2)))


def _position(key: str, label: str, n: int, default: int) -> int:
    """A position 0..n-1, opening on `default`; one kept from a longer text (or a link) brought back into range."""
    value = st.session_state.get(key, default)
    st.session_state[key] = min(max(0, value), n - 1) if isinstance(value, int) else default
    return int(st.number_input(f"{label} (0–{n - 1})", 0, n - 1, key=key))
