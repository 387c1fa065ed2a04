"""What a screen reader reads of a figure: its title as plain text. Pure: a plotly figure or an altair chart in, text
out."""

from __future__ import annotations

import html
import re

import altair as alt
import plotly.graph_objects as go

TAG = re.compile(r"<[^>]*>")  # the HTML plotly renders in its text (<br>, <b>, <span style=...>)


def plain_text(text: str) -> str:
    """Plotly text (`viz.tokens.plotly_text`, with its HTML) as a person reads it: tags dropped, a line break made a
    space, entities written as their characters."""
    return " ".join(html.unescape(TAG.sub(" ", text)).split())


def figure_title(figure: go.Figure | alt.TopLevelMixin) -> str:
    """The figure's title as plain text ("" where it has none); a layered chart's: its own, else its first layer's
    that has one."""
    if isinstance(figure, go.Figure):
        return plain_text(figure.layout.title.text or "")
    title = getattr(figure, "title", alt.Undefined)
    text = title if isinstance(title, str) else getattr(title, "text", alt.Undefined)
    if text is not alt.Undefined:
        return plain_text(text if isinstance(text, str) else " ".join(text))
    layers = getattr(figure, "layer", alt.Undefined)
    return next((found for layer in layers if (found := figure_title(layer))), "") if isinstance(layers, list) else ""
