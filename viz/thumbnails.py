"""Every head of every layer as one small picture: the "model view" thumbnail grid.

A full-resolution heatmap per head is far too much to send to a browser (12 x 12 heads at 128
tokens is 32 MB of plotly JSON; at 512 tokens it fails). Here each head is resampled to a fixed
size, scaled to 0-255 and packed into ONE uint8 image, sent to the browser as a PNG in an image
trace: the browser decodes it natively, where a heatmap trace would colour every cell in
JavaScript (measured: most of the page's drawing time).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from PIL import Image

from attention_atlas.viz.masked import LEGEND_BELOW, MASKED_RGB
from attention_atlas.viz.masked import legend_entry as masked_legend_entry
from attention_atlas.viz.tokens import plotly_text

GAP = 2  # pixels between thumbnails
TOP, MASKED = 254, 255  # pixel values: attention scaled to 0..TOP; MASKED where every cell of the pixel is masked


def pixel_starts(n: int, size: int) -> np.ndarray:
    """(size,) where each of `size` pixels starts among n positions: its first position when shrinking (blocks),
    the one it repeats when growing."""
    return (np.arange(size) * n) // size


def resample(matrix: np.ndarray, size: int) -> np.ndarray:
    """(q, k) -> (size, size): block means when shrinking, nearest neighbours when growing."""
    out = np.asarray(matrix, dtype=np.float32)
    for axis in (0, 1):
        n = out.shape[axis]
        starts = pixel_starts(n, size)
        if n >= size:
            counts = np.diff(np.append(starts, n))
            out = np.add.reduceat(out, starts, axis=axis) / np.expand_dims(counts, 1 - axis)
        else:
            out = np.take(out, starts, axis=axis)
    return out


def masked_pixels(visible: np.ndarray, size: int) -> np.ndarray:
    """(q, k) bool mask (True = may attend) -> (size, size) bool: True where every cell of the pixel is masked,
    the pixels cut as `resample` cuts them. A logical or of each block, not its mean: at 8,192 tokens the mean
    made a float copy of the whole mask (268 MB) and took about a second."""
    out = np.asarray(visible, dtype=bool)
    for axis in (0, 1):
        n = out.shape[axis]
        at = pixel_starts(n, size)
        out = np.logical_or.reduceat(out, at, axis=axis) if n >= size else np.take(out, at, axis=axis)
    return ~out


def thumbnail_grid(
    layer_patterns: Iterable[np.ndarray], size: int = 40, visible: np.ndarray | None = None
) -> np.ndarray:
    """Each layer's pattern (heads, q, k) -> uint8 image (layers * (size + GAP), heads * (size + GAP)),
    each head scaled to its own maximum (0..TOP) so that faint heads stay visible. Layers are read one at a
    time: given a generator, only one layer's pattern is held at once. visible: (q, k) bool, the mask
    (True = may attend); pixels whose every cell is masked get the value MASKED."""
    cell = size + GAP
    hidden = masked_pixels(visible, size) if visible is not None else None  # (size, size) bool
    rows = []  # one (cell, heads * cell) strip per layer
    for pattern in layer_patterns:
        row = np.zeros((cell, pattern.shape[0] * cell), dtype=np.uint8)
        for head, matrix in enumerate(pattern):
            small = resample(matrix, size)
            peak = float(small.max()) or 1.0
            pixels = np.round(TOP * small / peak).astype(np.uint8)
            if hidden is not None:
                pixels[hidden] = MASKED
            row[:size, head * cell : head * cell + size] = pixels
        rows.append(row)
    return np.concatenate(rows)


def colour_png(image: np.ndarray, colorscale: str) -> str:
    """uint8 (h, w) -> a data URI of a palette PNG (one byte a pixel): 0..TOP coloured with a plotly colour
    scale, MASKED in the masked grey."""
    scale = plotly.colors.get_colorscale(colorscale)
    palette = np.array(plotly.colors.sample_colorscale(scale, np.linspace(0, 1, TOP + 1), colortype="tuple"))
    palette = np.vstack([np.round(255 * palette), [MASKED_RGB]]).astype(np.uint8)  # (256, 3)
    png = Image.fromarray(image, "P")
    png.putpalette(palette.tobytes())
    buffer = io.BytesIO()
    png.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def thumbnail_figure(image: np.ndarray, size: int, title: str = "", colorscale: str = "Viridis",
                     layer_words: Sequence[str] | None = None) -> go.Figure:
    """The grid image with layer and head tick labels, and the "masked" legend entry where pixels are masked;
    `layer_words` names each row's layer ("layer 3 (attention layer 1)" in a hybrid; default "layer 0", "layer 1" ...).

    Over each thumbnail lies an invisible marker (trace 1, point index = layer * heads + head), so a
    click on a thumbnail selects a point that names its head; `head_at` reads it back."""
    cell = size + GAP
    layers, heads = image.shape[0] // cell, image.shape[1] // cell
    centres = np.arange(max(layers, heads)) * cell + size / 2
    layer_of, head_of = np.divmod(np.arange(layers * heads), heads)
    words = list(layer_words) if layer_words is not None else [f"layer {layer}" for layer in range(layers)]
    masked = bool((image == MASKED).any())
    return go.Figure({  # one dict, validated once: several times faster than update_* calls
        "data": [
            {"type": "image", "source": colour_png(image, colorscale), "hoverinfo": "skip"},
            {"type": "scatter", "x": centres[head_of], "y": centres[layer_of], "mode": "markers", "showlegend": False,
             "marker": {"symbol": "square", "size": max(8, size * 0.6), "color": "rgba(0,0,0,0)"},
             "customdata": np.stack([layer_of, head_of], axis=1), "text": [plotly_text(words[i]) for i in layer_of],
             "hovertemplate": "%{text} · head %{customdata[1]}<br>click to open<extra></extra>"},
            *([masked_legend_entry()] if masked else []),
        ],
        "layout": {
            "legend": LEGEND_BELOW,
            "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
            "xaxis": {"tickvals": centres[:heads], "ticktext": [str(h) for h in range(heads)],
                      "title": {"text": "head"}, "side": "top", "showgrid": False, "zeroline": False,
                      "range": [-0.5, image.shape[1] - 0.5], "constrain": "domain"},
            "yaxis": {"tickvals": centres[:layers], "ticktext": [plotly_text(w.removeprefix("layer ")) for w in words],
                      "title": {"text": "layer"}, "automargin": True, "range": [image.shape[0] - 0.5, -0.5],
                      "showgrid": False, "zeroline": False, "scaleanchor": "x",
                      "constrain": "domain"},  # the image's extent exactly
            "height": min(2200, 120 + layers * max(cell, 24)), "clickmode": "event+select",
            "margin": {"l": 50, "r": 10, "t": 70, "b": 40 if masked else 10},
        },
    })


def head_at(point_index: int, heads: int) -> tuple[int, int]:
    """The (layer, head) of a clicked marker of `thumbnail_figure`."""
    layer, head = divmod(point_index, heads)
    return int(layer), int(head)
