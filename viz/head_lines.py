"""The bertviz-style "head view": query tokens on the left, key tokens on the right, a line per attention weight.

Lines are cheap only when grouped: one trace per line would be 2.4M traces at 512 tokens x 9 heads. Here weights
under a threshold are dropped, at most `max_lines` of the strongest are kept, and each head's lines are split into
a few width/opacity bins, one scatter trace per (head, bin) whose segments are separated by NaN gaps. Hover sits on
an invisible marker at each line's midpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text

PALETTE = plotly.colors.qualitative.Plotly  # mid-tone colours, readable on light and dark backgrounds
BIN_EDGES = (0.05, 0.15, 0.4)  # attention probability edges of the 4 bins (absolute, so heads compare)
BIN_WIDTHS = (0.6, 1.2, 2.2, 3.5)  # px
BIN_OPACITIES = (0.25, 0.45, 0.7, 0.95)
ROW_PX, MIN_HEIGHT, MAX_HEIGHT = 18, 320, 2400  # beyond MAX_HEIGHT the rows get tighter
X_QUERY, X_KEY = 0.0, 1.0
DEFAULT_THRESHOLD = 0.02  # weights below this draw no line


class Lines(NamedTuple):
    """The lines kept, one entry each, sorted by head (in the order asked), query, key."""

    head: np.ndarray  # (n,) int
    query: np.ndarray  # (n,) int
    key: np.ndarray  # (n,) int
    weight: np.ndarray  # (n,) float32


def head_color(head: int) -> str:
    """The colour of a head, cycling through the palette."""
    return PALETTE[head % len(PALETTE)]


def select_lines(
    pattern: np.ndarray,
    heads: Sequence[int],
    focus: int | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    max_lines: int = 4000,
) -> Lines:
    """pattern: (heads, q_len, k_len). Weights >= threshold of the listed heads (of query `focus` alone if given);
    if more than `max_lines`, the strongest `max_lines` of them."""
    n_heads, q_len, _ = pattern.shape
    heads = list(dict.fromkeys(int(h) for h in heads))  # unique, in the order asked
    if any(not 0 <= h < n_heads for h in heads):
        raise ValueError(f"heads must lie in 0..{n_heads - 1}, got {heads}")
    if focus is not None and not 0 <= focus < q_len:
        raise ValueError(f"focus must lie in 0..{q_len - 1}, got {focus}")
    rows = slice(None) if focus is None else slice(focus, focus + 1)
    picked = np.asarray(pattern[heads][:, rows, :], dtype=np.float32)  # (len(heads), q or 1, k_len)
    slot, query, key = np.nonzero(picked >= threshold)
    weight = picked[slot, query, key]
    if len(weight) > max_lines:
        top = np.sort(np.argpartition(-weight, max_lines - 1)[:max_lines]) if max_lines > 0 else np.arange(0)
        slot, query, key, weight = slot[top], query[top], key[top], weight[top]
    if focus is not None:
        query = query + focus
    return Lines(np.asarray(heads, dtype=np.int64)[slot], query, key, weight)


def _segments(lines: Lines) -> tuple[np.ndarray, np.ndarray]:
    """x and y (3n,) of the segments query -> key, each followed by NaN so that plotly breaks the line there.
    (NaN in a numpy array, not None in a list: plotly validates lists element by element, 10x slower.)"""
    n = len(lines.weight)
    y = np.full((n, 3), np.nan, dtype=np.float32)
    y[:, 0], y[:, 1] = lines.query, lines.key
    return np.tile(np.array([X_QUERY, X_KEY, np.nan], dtype=np.float32), n), y.ravel()


def _token_column(labels: list[str], x: float, side: str, font_px: int, bold: int | None) -> go.Scatter:
    text = [f"<b>{t}</b>" if i == bold else t for i, t in enumerate(labels)]
    return go.Scatter(
        x=[x] * len(labels), y=list(range(len(labels))), mode="markers+text", text=text,
        textposition=f"middle {side}", textfont={"size": font_px}, cliponaxis=False,
        marker={"size": 4, "color": "gray"}, customdata=[f"{i}: {t}" for i, t in enumerate(labels)],
        hovertemplate="%{customdata}<extra>" + ("query" if x == X_QUERY else "key") + "</extra>", showlegend=False,
    )


def head_lines_figure(
    pattern: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    heads: Sequence[int],
    focus: int | None = None,
    title: str = "",
    *,
    threshold: float = DEFAULT_THRESHOLD,
    max_lines: int = 4000,
) -> go.Figure:
    """pattern: (heads, q_len, k_len) attention probabilities. Lines from query i (left) to key j (right) for the
    listed heads, one colour per head, width and opacity by weight; clicking a head in the legend toggles it."""
    if pattern.shape[1:] != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"pattern {pattern.shape} does not match {len(query_tokens)} x {len(key_tokens)} tokens")
    lines = select_lines(pattern, heads, focus, threshold=threshold, max_lines=max_lines)
    q_labels = [plotly_label(t) for t in query_tokens]
    k_labels = [plotly_label(t) for t in key_tokens]
    bins = np.digitize(lines.weight, BIN_EDGES)  # (n,) in 0..3
    traces: list[go.Scatter] = []
    for head in dict.fromkeys(int(h) for h in heads):
        group, color, mine = f"head {head}", head_color(head), lines.head == head
        traces.append(go.Scatter(x=[None], y=[None], mode="lines", line={"color": color, "width": 3}, name=group,
                                 legendgroup=group, showlegend=True, hoverinfo="skip"))
        for b, (width, opacity) in enumerate(zip(BIN_WIDTHS, BIN_OPACITIES, strict=True)):
            part = Lines(*(a[mine & (bins == b)] for a in lines))
            if len(part.weight):
                x, y = _segments(part)
                traces.append(go.Scatter(x=x, y=y, mode="lines", line={"color": color, "width": width},
                                         opacity=opacity, legendgroup=group, showlegend=False, hoverinfo="skip"))
        part = Lines(*(a[mine] for a in lines))
        pairs = zip(part.query.tolist(), part.key.tolist(), part.weight.tolist(), strict=True)
        hover = np.array([f"{q_labels[q]} ({q}) → {k_labels[k]} ({k}): {w:.3f}" for q, k, w in pairs], dtype=object)
        traces.append(go.Scatter(
            x=np.full(len(hover), (X_QUERY + X_KEY) / 2, dtype=np.float32), y=(part.query + part.key) / 2,
            mode="markers",
            marker={"size": 8, "color": color, "opacity": 0}, customdata=hover, legendgroup=group, showlegend=False,
            hovertemplate=f"%{{customdata}}<extra>{group}</extra>", hoverlabel={"bgcolor": color},
        ))
    rows = max(len(q_labels), len(k_labels), 1)
    height = max(MIN_HEIGHT, min(MAX_HEIGHT, 100 + ROW_PX * rows))
    font_px = int(max(6, min(12, (height - 100) / rows - 4)))
    traces.append(_token_column(q_labels, X_QUERY, "left", font_px, focus))
    traces.append(_token_column(k_labels, X_KEY, "right", font_px, None))
    fig = go.Figure(traces)
    fig.update_xaxes(visible=False, range=[-0.45, 1.45], fixedrange=True)
    fig.update_yaxes(visible=False, range=[rows - 0.5, -0.5])  # reversed: token 0 at the top
    fig.update_layout(title=plotly_text(title), height=height, hovermode="closest", legend={"title": {"text": "head"}},
                      margin={"l": 10, "r": 10, "t": 60 if title else 30, "b": 10})
    return fig
