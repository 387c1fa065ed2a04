"""How masked cells are drawn: hatched grey, never a colour of the scale, so that a masked cell (the score
was −∞ before the softmax) cannot be mistaken for a weight that merely came out near 0.

A heatmap leaves masked cells empty (NaN) and a hatched image lies under the plot area, showing through
them; a legend entry names it. Thumbnails reserve one palette index for masked pixels.
"""

from __future__ import annotations

import base64
import functools
import io
from typing import Any

import numpy as np
from PIL import Image

MASKED_LABEL = "masked (−∞ before the softmax)"
MASKED_RGB = (190, 190, 190)  # light grey: distinct from every colour scale offered, light or dark theme
HATCH_RGB = (120, 120, 120)
HATCH_PX, HATCH_PERIOD = 600, 12  # image side and stripe period in pixels (stretched over the plot area)


@functools.lru_cache(maxsize=1)
def hatch_png() -> str:
    """A data URI of a square PNG with grey diagonal stripes (a few hundred bytes)."""
    i, j = np.indices((HATCH_PX, HATCH_PX))
    stripes = ((i + j) % HATCH_PERIOD) < 2  # (px, px) bool
    image = Image.fromarray(stripes.astype(np.uint8), "P")
    image.putpalette([*MASKED_RGB, *HATCH_RGB])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def hatch_image() -> dict[str, Any]:
    """A layout image filling the plot area under the traces: it shows wherever a heatmap cell is empty."""
    return {"source": hatch_png(), "xref": "x domain", "yref": "y domain", "x": 0, "y": 1, "sizex": 1, "sizey": 1,
            "xanchor": "left", "yanchor": "top", "sizing": "stretch", "layer": "below"}


def legend_entry() -> dict[str, Any]:
    """An empty scatter trace whose only job is the legend's "masked" entry."""
    return {"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": MASKED_LABEL,
            "showlegend": True, "hoverinfo": "skip",
            "marker": {"symbol": "square", "size": 14, "color": f"rgb{MASKED_RGB}",
                       "line": {"color": f"rgb{HATCH_RGB}", "width": 2}}}


LEGEND_ABOVE = {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.01, "yanchor": "bottom"}  # heatmaps
LEGEND_BELOW = {"orientation": "h", "x": 1, "xanchor": "right", "y": -0.01, "yanchor": "top"}  # thumbnail grids
