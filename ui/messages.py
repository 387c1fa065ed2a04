"""Messages that quote what a person typed, shown literally (st.error and friends render Markdown)."""

from __future__ import annotations

import re

import streamlit as st

MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def literal(text: str) -> str:
    """Backslash-escape Markdown's punctuation so that `*`, `_`, backticks, `$` and `[..]` show as typed."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", text)


def show_error(text: str) -> None:
    st.error(literal(text), icon=":material/error:")
