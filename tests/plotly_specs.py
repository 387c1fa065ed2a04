"""Reading back the plotly figures an AppTest run drew: their specs and their arrays as plotly received them."""

from __future__ import annotations

import base64
import json

import numpy as np
from streamlit.testing.v1 import AppTest


def chart_specs(at: AppTest) -> list[dict]:
    """Every plotly figure of the run, as the JSON spec sent to the browser, in page order."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart(at: AppTest, title_part: str) -> dict:
    """The first figure whose title contains `title_part`."""
    return next(spec for spec in chart_specs(at) if title_part in spec["layout"].get("title", {}).get("text", ""))


def plotly_array(value: dict | list) -> np.ndarray:
    """A plotly array as sent: a base64 typed array ({"dtype", "bdata", "shape"}) or nested lists."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in value["shape"].split(",")]) if "shape" in value else flat
    return np.array(value, dtype=np.float64)
