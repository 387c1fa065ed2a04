"""Masks as figures: a mask matrix with why each cell is hidden, scores before and after the mask, the difference
a mask makes, next-token choices with and without it, and a softmax row worked by hand (why −∞ and not 0)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.viz.colours import OKABE_ITO
from attention_atlas.viz.heatmap import matrix_heatmap
from attention_atlas.viz.tokens import plotly_label, plotly_text, visible_token

VISIBLE_RGB = "rgb(76, 120, 168)"  # a cell where the query may attend to the key
# the tint of each reason a cell is hidden, told apart with red-green colour blindness too (a causal mask and a
# sliding window are often drawn together)
REASON_RGB = {"causal": OKABE_ITO["vermillion"], "window": OKABE_ITO["bluish green"],
              "padding": OKABE_ITO["reddish purple"], "blocked": OKABE_ITO["orange"], "chunk": OKABE_ITO["sky blue"]}
REASON_TEXT = {"causal": "hidden by the causal mask (a later key)",
               "window": "hidden by the sliding window (too far back)", "padding": "hidden by the padding mask",
               "blocked": "hidden by your custom mask", "chunk": "hidden by the chunk (an earlier chunk's key)"}


def hidden_reasons(visible: np.ndarray, causal: bool, blocked: Sequence[tuple[int, int]] = (),
                   window: int = 0, chunk: int = 0) -> dict[str, np.ndarray]:
    """visible: (q_len, k_len) bool -> reason -> (q_len, k_len) bool, True where that reason hides the cell. A cell
    above the diagonal of a causal mask is "causal", one `window` or more keys away in a sliding-window layer
    "window", a key outside the query's chunk of `chunk` positions (0..c-1, c..2c-1, ...) in a chunked layer
    (Llama 4) "chunk", a blocked pair not already so "blocked", the rest "padding"."""
    hidden = ~visible
    q_len, k_len = visible.shape
    causal_cells = np.triu(np.ones((q_len, k_len), dtype=bool), 1) & hidden if causal else np.zeros_like(hidden)
    distance = np.abs(np.subtract.outer(np.arange(q_len), np.arange(k_len)))  # |query - key|
    far = distance >= window if window else np.zeros_like(hidden)
    window_cells = far & hidden & ~causal_cells
    chunk_cells = _apart(np.arange(q_len), k_len, chunk) & hidden & ~causal_cells & ~window_cells
    blocked_cells = np.zeros_like(hidden)
    for query, key in blocked:
        if query < q_len and key < k_len:
            blocked_cells[query, key] = True
    blocked_cells &= hidden & ~causal_cells & ~window_cells & ~chunk_cells
    reasons = {"causal": causal_cells, "window": window_cells, "chunk": chunk_cells, "blocked": blocked_cells,
               "padding": hidden & ~causal_cells & ~window_cells & ~chunk_cells & ~blocked_cells}
    return {name: cells for name, cells in reasons.items() if cells.any()}


def _apart(rows: np.ndarray, k_len: int, chunk: int) -> np.ndarray:
    """(len(rows), k_len) bool: whether each key is outside the chunk of `chunk` positions of each query (at `rows`);
    all False without chunks."""
    if not chunk:
        return np.zeros((len(rows), k_len), dtype=bool)
    return rows[:, None] // chunk != np.arange(k_len)[None] // chunk


def hidden_counts(visible: np.ndarray, causal: bool, blocked: Sequence[tuple[int, int]] = (), window: int = 0,
                  rows_at_once: int = 512, chunk: int = 0) -> dict[str, int]:
    """reason -> how many cells it hides, as `hidden_reasons` marks them, counted a block of rows at a time (no
    (q_len, k_len) array made: at 8,192 tokens each was 67 MB)."""
    q_len, k_len = visible.shape
    hidden = visible.size - np.count_nonzero(visible)
    above = far = apart = 0  # hidden cells above the diagonal; `window` or more away from it (and not above); in
    for first in range(0, q_len, rows_at_once):  # another chunk (and neither)
        rows = ~visible[first : first + rows_at_once]
        above += np.count_nonzero(np.triu(rows, first + 1)) if causal else 0
        near = rows.copy()  # the hidden cells neither above the diagonal nor too far
        if causal:
            near = np.tril(near, first)
        if window:
            far += np.count_nonzero(np.tril(rows, first - window))
            far += 0 if causal else np.count_nonzero(np.triu(rows, first + window))
            near = np.triu(np.tril(near, first + window - 1), first - window + 1)
        if chunk:
            apart += np.count_nonzero(near & _apart(np.arange(first, first + len(rows)), k_len, chunk))
    pairs = {(q, k) for q, k in blocked if q < q_len and k < k_len and not visible[q, k] and not (causal and k > q)
             and not (window and abs(q - k) >= window) and not (chunk and q // chunk != k // chunk)}
    counts = {"causal": above, "window": far, "chunk": apart, "blocked": len(pairs),
              "padding": hidden - above - far - apart - len(pairs)}
    return {name: count for name, count in counts.items() if count}


LEGEND_GAP = 75  # pixels from the plot's bottom edge to the legend: below the keys and the axis title


def _legend(name: str, colour: str) -> dict[str, Any]:
    return {"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": name, "showlegend": True,
            "hoverinfo": "skip", "marker": {"symbol": "square", "size": 14, "color": colour}}


def mask_figure(visible: np.ndarray, reasons: dict[str, np.ndarray], row_tokens: Sequence[str],
                col_tokens: Sequence[str], title: str, **options: Any) -> go.Figure:
    """visible: (q_len, k_len) bool. Visible cells solid blue; hidden cells hatched grey (as in every attention
    figure), tinted by the reason that hides them, each reason named in the legend. Options as `matrix_heatmap`."""
    solid = [[0, VISIBLE_RGB], [1, VISIBLE_RGB]]
    fig = matrix_heatmap(np.ones(visible.shape, dtype=np.float32), row_tokens, col_tokens, title, colorscale=solid,
                         masked=~visible, value_name="visible", **options)
    fig.update_traces(showscale=False, hovertemplate="%{y} → %{x}<br>may attend<extra></extra>",
                      selector={"type": "heatmap"})
    x, y = fig.data[0].x, fig.data[0].y
    for name, cells in reasons.items():
        z = np.where(cells, np.float32(1), np.float32(np.nan))  # (q_len, k_len): only this reason's cells
        fig.add_trace(go.Heatmap(z=z, x=x, y=y, colorscale=[[0, REASON_RGB[name]], [1, REASON_RGB[name]]],
                                 showscale=False, opacity=0.45, hoverongaps=False,
                                 hovertemplate=f"%{{y}} → %{{x}}<br>{REASON_TEXT[name]}<extra></extra>"))
        fig.add_trace(_legend(REASON_TEXT[name], REASON_RGB[name]))
    fig.add_trace(_legend("may attend", VISIBLE_RGB))
    below = -LEGEND_GAP / max(fig.layout.height - 60, 100)  # the plot's height less its top and bottom margins
    fig.update_layout(legend={"orientation": "h", "x": 0, "xanchor": "left", "y": below, "yanchor": "top"},
                      margin={"t": 40, "b": 20})  # below the key axis: three entries above would cover the title
    return fig


def after_mask(scores: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """(..., q_len, k_len) scores -> the same with −∞ where the mask hides the key (what the softmax reads)."""
    return np.where(visible, scores.astype(np.float32), np.float32(-np.inf))


def visible_range(scores: np.ndarray, visible: np.ndarray) -> tuple[float, float]:
    """The colour range of scores: the smallest and largest visible score (hidden ones may be the dtype minimum)."""
    shown = scores[visible & np.isfinite(scores)]
    low, high = (float(shown.min()), float(shown.max())) if shown.size else (0.0, 1.0)
    return low, max(high, low + 1e-6)


def difference_figure(difference: np.ndarray, row_tokens: Sequence[str], col_tokens: Sequence[str], title: str,
                      **options: Any) -> go.Figure:
    """(q_len, k_len) differences of two patterns on a diverging scale centred on 0 (red: more, blue: less)."""
    top = float(np.abs(difference).max()) or 1e-6
    return matrix_heatmap(difference, row_tokens, col_tokens, title, zrange=(-top, top), colorscale="RdBu_r",
                          value_name="difference", **options)


def next_token_comparison(choices: dict[str, tuple[Sequence[str], np.ndarray]], title: str = "") -> go.Figure:
    """choices: run label -> (tokens, probabilities), most likely first. Grouped horizontal bars over the union
    of the tokens, in the first run's order; a token missing from a run's list shows no bar there."""
    order = list(dict.fromkeys(t for tokens, _ in choices.values() for t in tokens))
    fig = go.Figure()
    for label, (tokens, probabilities) in choices.items():
        label = plotly_text(label)
        share = dict(zip(tokens, np.asarray(probabilities, dtype=np.float64), strict=True))
        x = [share.get(t) for t in order]
        fig.add_trace(go.Bar(x=x, y=list(range(len(order))), orientation="h", name=label,
                             hovertemplate=f"{label}: %{{x:.3f}}<extra></extra>"))
    fig.update_yaxes(tickvals=list(range(len(order))), ticktext=[plotly_label(t) for t in order],
                     autorange="reversed")
    fig.update_xaxes(title="probability", range=[0, 1])
    fig.update_layout(title=plotly_text(title), barmode="group", height=80 + 36 * len(order),
                      margin={"l": 80, "r": 20, "t": 50, "b": 40}, legend={"orientation": "h", "y": -0.15})
    return fig


def softmax(row: np.ndarray) -> np.ndarray:
    """A softmax over the last axis in float64; −∞ entries get exactly 0."""
    row = np.asarray(row, dtype=np.float64)
    exp = np.exp(row - row.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def why_table(scores: np.ndarray, visible: np.ndarray, key_tokens: Sequence[str],
              key_positions: Sequence[int]) -> pd.DataFrame:
    """One query's scores (k_len,) and which keys it may see (k_len,) bool, worked three ways: + M with −∞
    (the mask), masked scores set to 0 (a hidden key still gets weight), and zeroing after the softmax (the row
    no longer sums to 1)."""
    scores = np.asarray(scores, dtype=np.float64)
    with_zero = np.where(visible, scores, 0.0)
    after = np.where(visible, softmax(scores), 0.0)
    table = pd.DataFrame({
        "may see": visible,
        "score s": scores,
        "s + M": np.where(visible, scores, -np.inf),
        "softmax(s + M)": softmax(np.where(visible, scores, -np.inf)),
        "s, hidden set to 0": with_zero,
        "softmax of that": softmax(with_zero),
        "softmax(s), hidden zeroed after": after,
    }, index=[f"#{p} {visible_token(t)}" for p, t in zip(key_positions, key_tokens, strict=True)])
    return table.rename_axis("key")
