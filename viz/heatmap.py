"""One attention matrix as a plotly heatmap."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.tokens import plotly_label


def attention_heatmap(
    weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str = ""
) -> go.Figure:
    """weights: (q_len, k_len) probabilities. Rows are queries (top to bottom), columns keys.

    Axes are positions labelled with their tokens, so repeated tokens stay separate cells; the
    hover reads "query -> key: weight".
    """
    q_labels = [plotly_label(t) for t in query_tokens]
    k_labels = [plotly_label(t) for t in key_tokens]
    hover = np.array([[f"{q} → {k}" for k in k_labels] for q in q_labels], dtype=object)
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(weights, dtype=np.float32),
            customdata=hover,
            hovertemplate="%{customdata}: %{z:.3f}<extra></extra>",
            colorscale="Viridis",
            zmin=0.0,
            zmax=1.0,
            colorbar={"title": "weight"},
        )
    )
    fig.update_xaxes(title="key", tickvals=list(range(len(k_labels))), ticktext=k_labels, side="top")
    fig.update_yaxes(title="query", tickvals=list(range(len(q_labels))), ticktext=q_labels, autorange="reversed")
    side = max(320, min(900, 40 + 28 * max(len(q_labels), len(k_labels))))
    fig.update_layout(title=title, height=side, margin={"l": 60, "r": 20, "t": 80, "b": 20})
    return fig
