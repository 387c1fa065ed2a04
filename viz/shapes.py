"""The shape trace as a table and one layer as a diagram: each module a box, the shape of what flows
between them written on the arrows."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_text

PLUMBING = ("Dropout", "Identity")  # modules that leave their input as it is: left out of the diagram
ROW_PX = 46


def without_batch(shapes: str) -> str:
    """'(1, 12, 64)' -> '(12, 64)': the batch dimension of every shape in the string dropped."""
    return shapes.replace("(1, ", "(").replace("(1)", "()")


def layer_diagram(calls: pd.DataFrame, title: str) -> go.Figure:
    """calls: one layer's rows of the shape table (model/inspect/shapes.py `calls_table`). Its leaf modules in the
    order they ran (plumbing left out), top to bottom, each arrow labelled with the shape its box hands on
    (batch dimension dropped)."""
    boxes = list(calls[calls["leaf"] & ~calls["type"].isin(PLUMBING)].itertuples())
    n = len(boxes)
    annotations = []
    for i, call in enumerate(boxes):
        y = n - i
        short = plotly_text(call.module.split(f".{call.layer}.", 1)[-1])
        params = f" · {call.parameters:,} params" if call.parameters else ""
        annotations.append({"x": 0.25, "y": y, "text": f"<b>{short}</b> <i>{plotly_text(call.type)}</i>{params}",
                            "showarrow": False, "bordercolor": "#888", "borderwidth": 1, "borderpad": 4,
                            "bgcolor": "rgba(120,150,200,0.18)", "xanchor": "center"})
        if i < n - 1:
            annotations.append({"x": 0.25, "y": y - 0.78, "ax": 0.25, "ay": y - 0.22, "xref": "x", "yref": "y",
                                "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 2, "text": ""})
            annotations.append({"x": 0.47, "y": y - 0.5, "text": without_batch(call.output_shape), "showarrow": False,
                                "xanchor": "left", "font": {"family": "monospace", "size": 12}})
    if boxes:
        annotations.append({"x": 0.47, "y": 0.5, "text": without_batch(boxes[-1].output_shape) + "  (out)",
                            "showarrow": False, "xanchor": "left", "font": {"family": "monospace", "size": 12}})
        annotations.append({"x": 0.47, "y": n + 0.5, "text": without_batch(boxes[0].input_shapes) + "  (in)",
                            "showarrow": False, "xanchor": "left", "font": {"family": "monospace", "size": 12}})
    return go.Figure({"data": [], "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"}, "annotations": annotations,
        "xaxis": {"visible": False, "range": [0, 1]}, "yaxis": {"visible": False, "range": [0, n + 1]},
        "height": 80 + ROW_PX * (n + 1), "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "plot_bgcolor": "rgba(0,0,0,0)"}})
