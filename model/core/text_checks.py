"""Checks on the text a person types, with messages that say what is wrong and what is allowed."""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable

from attention_atlas.model.core.errors import UserError

_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def describe_char(char: str) -> str:
    """'a' -> "'a'"; control or invisible characters -> 'U+0000 (NULL)'."""
    if (char.isprintable() and not char.isspace()) or char == " ":
        return repr(char)
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


def _unique(chars: Iterable[str]) -> list[str]:
    """Distinct characters in order of first appearance."""
    return list(dict.fromkeys(chars))


def validate_text(text: str, max_chars: int, allowed: Collection[str] | None = None, what: str = "text") -> str:
    """Return `text` if a model can take it, else raise ValueError naming the problem.

    Refused: empty or blank text, control characters other than tab/newline, lone surrogates,
    more than `max_chars` characters, and (when `allowed` is given) characters outside it.
    """
    if not text or not text.strip():
        raise UserError(f"The {what} is empty: type at least one character.")
    bad_controls = _unique(c for c in text if unicodedata.category(c) in ("Cc", "Cs") and c not in _ALLOWED_CONTROLS)
    if bad_controls:
        shown = ", ".join(describe_char(c) for c in bad_controls)
        raise UserError(f"The {what} contains control characters that cannot be tokenised: {shown}. Remove them.")
    if len(text) > max_chars:
        raise UserError(f"The {what} has {len(text):,} characters; this model accepts at most {max_chars:,}.")
    if allowed is not None:
        allowed_set = set(allowed)
        outside = _unique(c for c in text if c not in allowed_set)
        if outside:
            shown = ", ".join(describe_char(c) for c in outside)
            allowed_shown = "".join(sorted(allowed_set)).replace(" ", "")
            space = " and space" if " " in allowed_set else ""
            raise UserError(
                f"The {what} contains characters this model does not know: {shown}. "
                f"Allowed: {allowed_shown}{space}."
            )
    return text
