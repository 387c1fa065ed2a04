"""How tokens are written on axes and in tables."""

from __future__ import annotations

import html

VISIBLE_WHITESPACE = {" ": "·", "\t": "\\t", "\n": "\\n", "\r": "\\r"}  # glyphs every font has


def visible_token(token: str) -> str:
    """A token as a person should read it in a table: whitespace made visible, empty shown as ∅."""
    return "".join(VISIBLE_WHITESPACE.get(c, c) for c in token) or "∅"


def plotly_text(text: str) -> str:
    """Any text for a plotly string (a title, a tick label, a hover, a legend name, an annotation) written as typed:
    plotly renders some HTML in them and fills `%{...}` placeholders (hover templates, `%{meta}` in titles), so `&`,
    `<` and `>` are escaped and `%{` is written `&#37;{` (plotly shows both entities as their characters)."""
    return html.escape(text, quote=False).replace("%{", "&#37;{")


def plotly_label(token: str) -> str:
    """A token for plotly text: whitespace made visible, then `plotly_text`."""
    return plotly_text(visible_token(token))


def position_label(position: int, token: str) -> str:
    """"#3 o": a token named with its position, so that repeated tokens stay apart (CSV headers, pickers)."""
    return f"#{position} {visible_token(token)}"
