"""The Attention page's figures from a trace: one head's heatmap, the model view (every layer x head as a
thumbnail), and the token lines of a layer. `HeadChoice` is what the page chose (site, layer, head, the positions
drawn, the display options) with the figures it makes; the page and `attention_atlas.plot` draw through it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Self

import numpy as np
import plotly.graph_objects as go

from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.plot.common import check_index, check_pattern, check_site, site_label
from attention_atlas.viz import heatmap as viz_heatmap
from attention_atlas.viz.head_lines import head_lines_figure
from attention_atlas.viz.heatmap import attention_heatmap
from attention_atlas.viz.thumbnails import thumbnail_figure, thumbnail_grid

MODEL_VIEW_WIDTH = 900  # pixels the model view's thumbnails share across a row of heads


def thumbnail_size(heads: int) -> int:
    """Pixels per head in the model view: the heads of a layer share MODEL_VIEW_WIDTH (SmolLM2's 9: 64 px)."""
    return max(32, min(64, MODEL_VIEW_WIDTH // heads))


def shown_positions(trace: Trace, site: str, hide_special: bool) -> tuple[np.ndarray, np.ndarray]:
    """The query and key positions to draw: all, or all but the special tokens (if any are left)."""
    rows, cols = np.arange(len(trace.query_ids(site))), np.arange(len(trace.key_ids(site)))
    if hide_special:
        plain_rows = rows[~trace.is_special(trace.query_ids(site))]
        plain_cols = cols[~trace.is_special(trace.key_ids(site))]
        if len(plain_rows) and len(plain_cols):
            return plain_rows, plain_cols
    return rows, cols


@dataclass(frozen=True)
class HeadChoice:
    """A site, layer and head of a trace, the positions drawn and the display options; its figures."""

    trace: Trace
    site: str
    layer: int
    head: int
    rows: np.ndarray  # (q_shown,) query positions drawn
    cols: np.ndarray  # (k_shown,) key positions drawn
    hide_special: bool = False
    colorscale: str = "Viridis"
    show_values: bool = False

    def shown(self, matrix: np.ndarray) -> np.ndarray:
        """(..., q_len, k_len) -> (..., q_shown, k_shown) float32 (a copy only where something is left out)."""
        if len(self.rows) < matrix.shape[-2]:
            matrix = matrix[..., self.rows, :]
        return self._columns(matrix)

    def _columns(self, matrix: np.ndarray) -> np.ndarray:
        """(..., q_shown, k_len) -> (..., q_shown, k_shown) float32."""
        if len(self.cols) < matrix.shape[-1]:
            matrix = matrix[..., self.cols]
        return matrix.astype(np.float32, copy=False)

    @property
    def _query_rows(self) -> np.ndarray | slice:
        """The rows drawn, as the trace is asked for them (every row: a slice, which copies nothing)."""
        return slice(None) if len(self.rows) == len(self.trace.query_ids(self.site)) else self.rows

    @cached_property
    def pattern(self) -> np.ndarray:
        """(heads, q_shown, k_shown): the chosen layer as drawn, only the rows drawn computed."""
        return self._columns(self.trace.pattern_rows(self.site, self.layer, self._query_rows))

    @property
    def head_pattern(self) -> np.ndarray:
        """(q_shown, k_shown): the chosen head as drawn, only its rows drawn computed."""
        return self._columns(self.trace.head_pattern(self.site, self.layer, self.head, self._query_rows))

    @property
    def masked(self) -> np.ndarray:
        """(q_shown, k_shown) bool: True where this run's mask hid the key from the query."""
        return ~self.trace.masks[self.site][np.ix_(self.rows, self.cols)]

    @property
    def queries(self) -> list[str]:
        return [self.trace.query_tokens(self.site)[i] for i in self.rows]

    @property
    def keys(self) -> list[str]:
        return [self.trace.key_tokens(self.site)[i] for i in self.cols]

    @property
    def label(self) -> str:
        return site_label(self.trace, self.site)

    @property
    def where(self) -> str:
        return f"{self.label} · {self.trace.facts.layer_words(self.layer)}"

    def windowed(self, first_row: int | None = None, first_col: int | None = None) -> Self:
        """Long texts: a window of at most WINDOW x WINDOW cells. Rows from `first_row` (None: the last rows), keys
        from `first_col` (None: following the rows where queries and keys are one sequence, else the first keys)."""
        n_q, n_k, side = len(self.rows), len(self.cols), viz_heatmap.WINDOW  # read when called (tests shrink it)
        if max(n_q, n_k) <= side:
            return self
        w_q, w_k = min(side, n_q), min(side, n_k)
        row = n_q - w_q if first_row is None else check_index(first_row, n_q - w_q + 1, "first row")
        col = (row if n_q == n_k else 0) if first_col is None else check_index(first_col, n_k - w_k + 1, "first col")
        return replace(self, rows=self.rows[row:row + w_q], cols=self.cols[col:col + w_k])

    def heatmap(self, matrix: np.ndarray, title: str, masked: np.ndarray) -> go.Figure:
        """A (q_shown, k_shown) matrix with the chosen options, `masked` cells hatched. Hidden special tokens
        take weight with them, so the colours then stretch over what is shown."""
        top = (float(np.nanmax(matrix)) or 1.0) if self.hide_special else 1.0
        return attention_heatmap(matrix, self.queries, self.keys, title, row_positions=self.rows,
                                 col_positions=self.cols, colorscale=self.colorscale, show_values=self.show_values,
                                 zrange=(0.0, top), masked=masked)

    def head_figure(self, drawn: np.ndarray | None = None) -> go.Figure:
        """The chosen head's heatmap; `drawn`: its (q_shown, k_shown) pattern where the caller already read it."""
        return self.heatmap(self.head_pattern if drawn is None else drawn, f"{self.where} · head {self.head}",
                            self.masked)

    def lines_figure(self, heads: Sequence[int], focus: int | None = None) -> go.Figure:
        """The layer's token lines of `heads`; focus: one query (an index into the rows drawn) or every one."""
        return head_lines_figure(self.pattern, self.queries, self.keys, heads, focus, f"{self.where} · token lines")

    @property
    def rows_note(self) -> str:
        """What a row of the drawn matrix sums to."""
        if self.hide_special:
            return ("Each row sums to 1 over all keys; with special tokens hidden, the rows drawn sum to less and "
                    "the colours stretch up to the largest weight shown.")
        return "Each row sums to 1."


def choice(trace: Trace, name: str, head: int = 0, *, hide_special: bool = False, colorscale: str = "Viridis",
           show_values: bool = False) -> HeadChoice:
    """A head of the pattern `name` ("decoder.1.cross_attn.hook_pattern"), checked: ValueError says what is wrong."""
    site, layer = check_pattern(trace, name)
    head = check_index(head, trace.facts.n_heads, "head")
    rows, cols = shown_positions(trace, site, hide_special)
    return HeadChoice(trace, site, layer, head, rows, cols, hide_special, colorscale, show_values)


def summary_of(trace: Trace, site: str) -> SiteSummary:
    """Every layer of `site` reduced: made in the run, or here (the app keeps it in its cache instead)."""
    return trace.summaries.get(site) or summarise_site(trace, site)


def model_view_grid(trace: Trace, site: str, size: int, hide_special: bool = False,
                    summary: Callable[[Trace, str], SiteSummary] = summary_of) -> np.ndarray:
    """The uint8 thumbnail grid (layers x (size + gap), heads x (size + gap)) of a site, masked pixels marked: from
    the site's summary (`summary`), or with special tokens hidden, from a pass of its own over the other positions."""
    rows, cols = shown_positions(trace, site, hide_special)
    every = len(rows) == len(trace.query_ids(site)) and len(cols) == len(trace.key_ids(site))
    visible = trace.masks[site] if every else trace.masks[site][np.ix_(rows, cols)]  # no copy of the whole
    thumbnails = summary(trace, site).thumbnails if every else trace.layer_thumbnails(site, size, rows, cols)
    return thumbnail_grid(thumbnails, size, visible)


def model_view_figure(trace: Trace, site: str, image: np.ndarray, colorscale: str = "Viridis") -> go.Figure:
    """The model view of `site` drawn from its grid (`model_view_grid`)."""
    size = thumbnail_size(trace.facts.n_heads)
    words = [trace.facts.layer_words(layer) for layer in range(trace.n_layers(site))]  # a hybrid's true numbers
    return thumbnail_figure(image, size, f"{site_label(trace, site)}: layers × heads", colorscale, words)


def head(trace: Trace, name: str, head: int, *, hide_special: bool = False, colorscale: str = "Viridis",
         show_values: bool = False, first_row: int | None = None, first_col: int | None = None) -> go.Figure:
    """One head's attention (q_len, k_len) as a heatmap, as the Attention page's One head tab draws it.

    name: an attention pattern's hook name ("decoder.1.cross_attn.hook_pattern"); head: its index. hide_special:
    leave out <s>, [CLS] … rows and columns; show_values: write the weights in the cells (up to 40 tokens). Texts
    over 512 tokens are drawn as a 512 x 512 window: its rows from first_row (default: the last), its keys from
    first_col (default: following the rows in self-attention)."""
    chosen = choice(trace, name, head, hide_special=hide_special, colorscale=colorscale, show_values=show_values)
    return chosen.windowed(first_row, first_col).head_figure()


def model_view(trace: Trace, site: str | None = None, *, hide_special: bool = False,
               colorscale: str = "Viridis") -> go.Figure:
    """Every layer x head of a site as a thumbnail (block means, each scaled to its own maximum), as the Attention
    page's Model view draws it. site: "encoder.attn", "decoder.attn" or "decoder.cross_attn" (default: the first of
    `trace.sites()`)."""
    site = check_site(trace, site)
    image = model_view_grid(trace, site, thumbnail_size(trace.facts.n_heads), hide_special)
    return model_view_figure(trace, site, image, colorscale)


def lines(trace: Trace, name: str, *, heads: Sequence[int] | None = None, focus: int | None = None,
          hide_special: bool = False, first_row: int | None = None, first_col: int | None = None) -> go.Figure:
    """The token lines of one layer (bertviz's head view), as the Attention page's Token lines tab draws them: a line
    from each query (left) to each key (right) it gives at least 0.02, one colour per head.

    name: the layer's pattern ("encoder.0.attn.hook_pattern"); heads: which (default: all); focus: only the lines of
    one query, an index into the rows drawn. first_row, first_col: the window of a text over 512 tokens, as `head`."""
    chosen = choice(trace, name, hide_special=hide_special).windowed(first_row, first_col)
    n_heads = trace.facts.n_heads
    heads = list(range(n_heads)) if heads is None else [check_index(h, n_heads, "head") for h in heads]
    if focus is not None:
        focus = check_index(focus, len(chosen.rows), "focus query")
    return chosen.lines_figure(heads, focus)
