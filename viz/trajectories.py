"""Token trajectories: every token's residual vector after each layer, projected to 2-D by PCA.

The fit (documented, and tested on a synthetic case): the vectors of every layer and every token of this text,
X (layers x tokens, d_model), are centred by their mean; the two directions are the right singular vectors of
the centred X with the largest singular values (numpy SVD, of Xc^T Xc); x is drawn at (x - mean) · direction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text


@dataclass(frozen=True)
class Projection:
    mean: np.ndarray  # (d_model,)
    directions: np.ndarray  # (2, d_model), unit rows
    explained: np.ndarray  # (2,) share of the variance along each direction

    @property
    def nbytes(self) -> int:
        return self.mean.nbytes + self.directions.nbytes + self.explained.nbytes

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """(..., d_model) -> (..., 2)."""
        return (vectors - self.mean) @ self.directions.T


def fit_pca(layers: Iterable[np.ndarray]) -> Projection:
    """layers: arrays (tokens, d_model), e.g. the stream after each layer -> the two-component PCA of all their
    rows together. Accumulated as the d_model x d_model scatter matrix in float64 (2,048 tokens x 31 layers of
    SmolLM2 never stacked); its SVD gives the same directions as the SVD of the centred rows."""
    total, scatter, count = None, None, 0
    for block in layers:
        x = np.asarray(block, dtype=np.float64)  # (tokens, d_model)
        total = x.sum(axis=0) if total is None else total + x.sum(axis=0)
        scatter = x.T @ x if scatter is None else scatter + x.T @ x
        count += len(x)
    if total is None or count == 0:
        raise ValueError("no vectors to fit")
    mean = total / count
    centred = scatter - count * np.outer(mean, mean)  # (d_model, d_model) = Xc^T Xc
    _, variance, vt = np.linalg.svd(centred, hermitian=True)  # singular values of Xc^T Xc: Xc's squared
    return Projection(mean, vt[:2], variance[:2] / (variance.sum() or 1.0))


def trajectory_figure(points: np.ndarray, tokens: Sequence[str], positions: Sequence[int],
                      projection: Projection, title: str) -> go.Figure:
    """points: (layers, tokens, 2), one line per token through its layers in order; hover names token and layer."""
    layers = points.shape[0]
    data = []
    for j, (token, position) in enumerate(zip(tokens, positions, strict=True)):
        name = f"#{position} {plotly_label(token)}"
        data.append({"type": "scatter", "mode": "lines+markers+text", "x": points[:, j, 0].astype(np.float32),
                     "y": points[:, j, 1].astype(np.float32), "name": name, "customdata": list(range(layers)),
                     "text": [""] * (layers - 1) + [plotly_label(token)], "textposition": "top center",
                     "marker": {"size": [5] * (layers - 1) + [10]},
                     "hovertemplate": f"{name} · layer %{{customdata}}<extra></extra>"})
    pc1, pc2 = (100 * projection.explained).tolist() + [0.0] * (2 - len(projection.explained))
    return go.Figure({"data": data, "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"}, "height": 560,
        "xaxis": {"title": {"text": f"PC1 ({pc1:.0f}% of the variance)"}},
        "yaxis": {"title": {"text": f"PC2 ({pc2:.0f}%)"}}, "legend": {"title": {"text": "token"}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40}, "hoverlabel": {"font": {"size": 14}}}})
