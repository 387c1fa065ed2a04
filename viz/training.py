"""Training curves and per-head scores over training (altair), with the step a timeline points at marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import altair as alt
import numpy as np
import pandas as pd

MOST_POINTS = 500  # points a curve is drawn with: longer runs are averaged over consecutive steps
MARK_COLOUR = "#d62728"
_Drawn = TypeVar("_Drawn", alt.Chart, alt.LayerChart)


def averaged(values: Sequence[float], most: int = MOST_POINTS) -> tuple[np.ndarray, np.ndarray, int]:
    """(steps, values, width) of a per-step series (step 1 first), averaged over windows of `width` consecutive
    steps so that at most `most` points remain; each point stands at its window's last step."""
    v = np.asarray(values, dtype=np.float64)
    width = max(1, -(-len(v) // most))  # ceil
    ends = np.arange(width, len(v) + width, width).clip(max=len(v))  # (points,) last step of each window
    sums = np.add.reduceat(v, np.arange(0, len(v), width)) if len(v) else v
    return ends, sums / np.diff(np.concatenate([[0], ends])), width


def _marked(chart: _Drawn, step: int | None) -> _Drawn | alt.LayerChart:
    if step is None:
        return chart
    rule = alt.Chart(pd.DataFrame({"step": [step]})).mark_rule(color=MARK_COLOUR, strokeWidth=2).encode(x="step:Q")
    return alt.LayerChart(layer=[chart, rule])  # alt.layer's, less its facet hoisting (these charts have no facets)


def curve_chart(name: str, values: Sequence[float], marked: int | None, steps: int,
                y_domain: tuple[float, float] | None = None) -> alt.LayerChart | alt.Chart:
    """A per-step series (step 1 first; averaged where long, as the title says) over 0..steps, with `marked` drawn
    as a red rule."""
    at, mean, width = averaged(values)
    frame = pd.DataFrame({"step": at, name: mean})
    # the averaging on a line of its own, short: three charts share a row at a projector's width
    title = name if width == 1 else alt.TitleParams(name, subtitle=f"means of {width} steps")
    line = alt.Chart(frame, title=title).mark_line().encode(
        x=alt.X("step:Q", scale=alt.Scale(domain=[0, steps])),
        y=alt.Y(f"{name}:Q", scale=alt.Scale(domain=list(y_domain)) if y_domain else alt.Scale(zero=True)),
        tooltip=[alt.Tooltip("step:Q"), alt.Tooltip(f"{name}:Q", format=".4f")],
    ).properties(height=220)
    return _marked(line, marked)


def scores_chart(steps: Sequence[int], scores: np.ndarray, name: str, marked: int | None, total: int,
                 threshold: float | None = None) -> alt.LayerChart:
    """One line per head: steps (snapshots,), scores (snapshots, layers, heads) of the score `name`, over
    0..total steps; the best head at the last snapshot drawn thicker, `threshold` as a dashed rule, `marked` as a
    red rule. No legend (a narrow chart beside the curves): the tooltip names each head."""
    snapshots, layers, heads = scores.shape
    best = np.unravel_index(int(np.argmax(scores[-1])), (layers, heads)) if snapshots else (0, 0)
    rows = [{"step": steps[i], "head": f"layer {layer} · head {head}", name: float(scores[i, layer, head]),
             "best": (layer, head) == best}
            for i in range(snapshots) for layer in range(layers) for head in range(heads)]
    frame = pd.DataFrame(rows)
    lines = alt.Chart(frame, title=f"{name} score of every head").mark_line(point=snapshots <= 30).encode(
        x=alt.X("step:Q", scale=alt.Scale(domain=[0, total])),
        y=alt.Y(f"{name}:Q", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("head:N", legend=None),  # too many to name beside a narrow chart: the tooltip names each
        strokeWidth=alt.condition("datum.best", alt.value(3.5), alt.value(1.2)),
        tooltip=["head", alt.Tooltip("step:Q"), alt.Tooltip(f"{name}:Q", format=".3f")],
    ).properties(height=220)
    layers_drawn = [lines]
    if threshold is not None:
        layers_drawn.append(alt.Chart(pd.DataFrame({name: [threshold]})).mark_rule(strokeDash=[6, 4], color="grey")
                            .encode(y=f"{name}:Q"))
    return _marked(alt.LayerChart(layer=layers_drawn), marked)
