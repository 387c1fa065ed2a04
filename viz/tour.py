"""The Tour's diagram of the forward pass: one marker a step, top to bottom in the order they run (an encoder-decoder's
encoder, then its decoder, the encoder's output drawn into the decoder's cross-attention on the left), each labelled
with its step and the live shape of what it computes, the current step lit. Each marker is a point a click selects
(the page jumps there). Arrays in, a plotly figure out."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_text

ROW_PX = 21  # a step's height
LIT, UNLIT = "#d62728", "#9aa5b1"


def tour_diagram(labels: Sequence[str], shapes: Sequence[str], current: int,
                 joins: Sequence[tuple[int, int]] = ()) -> go.Figure:
    """labels, shapes: one per step, in order, joined top to bottom; `joins`: (from step, to step) drawn as a bracket
    on the left (the encoder's output into the decoder's cross-attention). The markers are the figure's last trace,
    point i being step i."""
    count = len(labels)
    figure = go.Figure(go.Scatter(x=[0] * count, y=[-i for i in range(count)], mode="lines", hoverinfo="skip",
                                  line={"color": UNLIT, "width": 2}, showlegend=False))
    for start, end in joins:
        figure.add_trace(go.Scatter(x=[0, -0.25, -0.25, 0], y=[-start, -start, -end, -end], mode="lines",
                                    hoverinfo="skip", line={"color": UNLIT, "width": 1.5, "dash": "dot"},
                                    showlegend=False))
    # the shape in italics, in the text's own colour: no grey reads at 4.5:1 on both themes' backgrounds
    text = [f"{plotly_text(label)}  <i>{plotly_text(shape)}</i>" if shape
            else plotly_text(label) for label, shape in zip(labels, shapes, strict=True)]
    figure.add_trace(go.Scatter(
        x=[0] * count, y=[-i for i in range(count)], mode="markers+text", text=text, textposition="middle right",
        marker={"size": [15 if i == current else 9 for i in range(count)],
                "color": [LIT if i == current else UNLIT for i in range(count)]},
        hovertext=[plotly_text(label) for label in labels], hoverinfo="text", showlegend=False,
        textfont={"size": 11}))
    figure.update_layout(
        height=30 + ROW_PX * count, margin={"l": 4, "r": 4, "t": 8, "b": 8}, dragmode=False,
        xaxis={"visible": False, "range": [-0.35, 3.2], "fixedrange": True},
        yaxis={"visible": False, "range": [-count + 0.5, 0.5], "fixedrange": True}, plot_bgcolor="rgba(0,0,0,0)")
    return figure
