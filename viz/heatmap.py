"""Token-by-token matrices (attention, similarity) as plotly heatmaps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.tokens import plotly_label


def matrix_heatmap(
    values: np.ndarray,
    row_tokens: Sequence[str],
    col_tokens: Sequence[str],
    title: str = "",
    *,
    zrange: tuple[float, float] = (0.0, 1.0),
    colorscale: str = "Viridis",
    value_name: str = "weight",
    axis_titles: tuple[str, str] = ("query", "key"),
) -> go.Figure:
    """values: (rows, cols). Rows run top to bottom. Axes are positions labelled with their tokens,
    so repeated tokens stay separate cells; the hover reads "row -> col: value"."""
    r_labels = [plotly_label(t) for t in row_tokens]
    c_labels = [plotly_label(t) for t in col_tokens]
    hover = np.array([[f"{r} → {c}" for c in c_labels] for r in r_labels], dtype=object)
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(values, dtype=np.float32),
            customdata=hover,
            hovertemplate="%{customdata}: %{z:.3f}<extra></extra>",
            colorscale=colorscale,
            zmin=zrange[0],
            zmax=zrange[1],
            colorbar={"title": value_name},
        )
    )
    fig.update_xaxes(title=axis_titles[1], tickvals=list(range(len(c_labels))), ticktext=c_labels, side="top")
    fig.update_yaxes(title=axis_titles[0], tickvals=list(range(len(r_labels))), ticktext=r_labels, autorange="reversed")
    side = max(320, min(900, 40 + 28 * max(len(r_labels), len(c_labels))))
    fig.update_layout(title=title, height=side, margin={"l": 60, "r": 20, "t": 80, "b": 20})
    return fig


def attention_heatmap(
    weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str = ""
) -> go.Figure:
    """weights: (q_len, k_len) probabilities; rows are queries, columns keys."""
    return matrix_heatmap(weights, query_tokens, key_tokens, title)


def similarity_heatmap(similarity: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """(len, len) cosine similarities of token vectors, from -1 (opposite) to 1 (same direction)."""
    return matrix_heatmap(similarity, tokens, tokens, title, zrange=(-1.0, 1.0), colorscale="RdBu_r",
                          value_name="cosine", axis_titles=("token", "token"))
