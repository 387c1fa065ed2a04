"""Every head of every layer as one small picture: the "model view" thumbnail grid.

A full-resolution heatmap per head is far too much to send to a browser (12 x 12 heads at 128
tokens is 32 MB of plotly JSON; at 512 tokens it fails). Here each head is resampled to a fixed
size, scaled to 0-255 and packed into ONE uint8 image: 30 x 9 heads at 40 px is 432 kB whatever
the sequence length.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

GAP = 2  # pixels between thumbnails


def resample(matrix: np.ndarray, size: int) -> np.ndarray:
    """(q, k) -> (size, size): block means when shrinking, nearest neighbours when growing."""
    out = np.asarray(matrix, dtype=np.float32)
    for axis in (0, 1):
        n = out.shape[axis]
        if n >= size:
            starts = (np.arange(size) * n) // size
            counts = np.diff(np.append(starts, n))
            out = np.add.reduceat(out, starts, axis=axis) / np.expand_dims(counts, 1 - axis)
        else:
            out = np.take(out, (np.arange(size) * n) // size, axis=axis)
    return out


def thumbnail_grid(layer_patterns: list[np.ndarray], size: int = 40) -> np.ndarray:
    """layer_patterns[l]: (heads, q, k). -> uint8 image (layers * (size + GAP), heads * (size + GAP)),
    each head scaled to its own maximum so that faint heads stay visible."""
    layers, heads = len(layer_patterns), layer_patterns[0].shape[0]
    cell = size + GAP
    image = np.zeros((layers * cell, heads * cell), dtype=np.uint8)
    for layer, pattern in enumerate(layer_patterns):
        for head in range(heads):
            small = resample(pattern[head], size)
            peak = float(small.max()) or 1.0
            image[layer * cell : layer * cell + size, head * cell : head * cell + size] = np.round(
                255 * small / peak
            ).astype(np.uint8)
    return image


def thumbnail_figure(image: np.ndarray, size: int, title: str = "") -> go.Figure:
    """The grid image as a heatmap with layer and head tick labels (uint8 values: a compact payload)."""
    cell = size + GAP
    layers, heads = image.shape[0] // cell, image.shape[1] // cell
    fig = go.Figure(go.Heatmap(z=image, colorscale="Viridis", showscale=False, hoverinfo="skip"))
    fig.update_xaxes(tickvals=[h * cell + size / 2 for h in range(heads)], ticktext=[str(h) for h in range(heads)],
                     title="head", side="top", showgrid=False)
    fig.update_yaxes(tickvals=[layer * cell + size / 2 for layer in range(layers)],
                     ticktext=[str(layer) for layer in range(layers)], title="layer", autorange="reversed",
                     showgrid=False, scaleanchor="x")
    fig.update_layout(title=title, height=min(1600, 120 + layers * max(cell, 24)),
                      margin={"l": 50, "r": 10, "t": 70, "b": 10})
    return fig
