"""Attention Atlas: see inside a live transformer, in the app or from Python.

    import attention_atlas as aa
    model = aa.load("toy-date")
    trace = model.run("march 3 2021")
    trace["decoder.1.cross_attn.hook_pattern"]    # (heads, query, key) numpy array
    aa.plot.head(trace, "decoder.1.cross_attn.hook_pattern", head=2)

docs/python.md lists every public name. Importing this package imports neither Streamlit nor torch: the names
below load what they need when first used. `attention-atlas` (cli.py) serves the app, whose frame is app.py here
(a link to the repository's app.py, a real file in a built wheel, with its .streamlit/ config beside it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attention_atlas import plot
    from attention_atlas.api import Model, list_models, load, load_trace
    from attention_atlas.model.core.trace.trace import Trace

__all__ = ["Model", "Trace", "list_models", "load", "load_trace", "plot"]
_HOMES = {"Model": "attention_atlas.api", "list_models": "attention_atlas.api", "load": "attention_atlas.api",
          "load_trace": "attention_atlas.api", "Trace": "attention_atlas.model.core.trace.trace"}


def __getattr__(name: str) -> Any:
    """The public names, imported when first asked for (PEP 562)."""
    if name == "plot":
        return importlib.import_module("attention_atlas.plot")
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'attention_atlas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
