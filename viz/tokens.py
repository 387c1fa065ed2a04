"""How tokens are written on axes and in tables."""

from __future__ import annotations

import html

VISIBLE_WHITESPACE = {" ": "·", "\t": "\\t", "\n": "\\n", "\r": "\\r"}  # glyphs every font has


def visible_token(token: str) -> str:
    """A token as a person should read it in a table: whitespace made visible, empty shown as ∅."""
    return "".join(VISIBLE_WHITESPACE.get(c, c) for c in token) or "∅"


def plotly_label(token: str) -> str:
    """A token for plotly text, which understands some HTML: escaped so that it shows literally."""
    return html.escape(visible_token(token), quote=False)


def position_label(position: int, token: str) -> str:
    """"#3 o": a token named with its position, so that repeated tokens stay apart (CSV headers, pickers)."""
    return f"#{position} {visible_token(token)}"
