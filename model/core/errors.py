"""The one exception meant for a person: `UserError`, a sentence saying what cannot be used and what to do.

Anything else raised is a bug: the app logs it with its traceback and tells the person that something went wrong
and where the details are (ui/runs.py), instead of showing a bug's message as if it were their mistake."""

from __future__ import annotations


class UserError(ValueError):
    """What a person gave (a text, a model, a file, a setting) cannot be used; the message says why and what to do.
    A ValueError, so that callers that catch ValueError (the command line, notebooks) keep working."""
