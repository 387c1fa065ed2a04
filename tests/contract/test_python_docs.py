"""docs/python.md is the Python API's reference: every public name (attention_atlas's, Model's, Trace's, and
attention_atlas.plot's) is there, each function with its signature as the code has it, and nothing it lists is
missing from the code."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import attention_atlas
from attention_atlas import plot
from attention_atlas.api import Model
from attention_atlas.model.core.trace.trace import Trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def plain_signature(name: str, function) -> str:
    """`load(model, *, device='auto')`: names, defaults and the keyword-only star, without annotations (the docs give
    the types in words)."""
    parts: list[str] = []
    star = False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in ("self", "cls"):
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            parts.append(f"*{parameter.name}")
            star = True
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if parameter.kind is parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
            continue
        default = "" if parameter.default is parameter.empty else f"={parameter.default!r}"
        parts.append(f"{parameter.name}{default}")
    return f"{name}({', '.join(parts)})"


def public() -> dict[str, object]:
    """Every public name, as the docs write it ("load", "Model.run", "Trace.tokens", "plot.head") -> the object
    (a dataclass field: None)."""
    names: dict[str, object] = {n: getattr(attention_atlas, n) for n in attention_atlas.__all__ if n != "plot"}
    for cls in (Model, Trace):
        members = [n for n in vars(cls) if not n.startswith("_")]
        members += [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
        names |= {f"{cls.__name__}.{n}": getattr(cls, n, None) for n in members}
    names["Trace.__getitem__"] = Trace.__getitem__
    names |= {f"plot.{n}": getattr(plot, n) for n in plot.__all__}
    return names


def _documented_signatures() -> set[str]:
    return set(re.findall(r"`([\w.]+\([^`]*\))`", DOC.read_text()))


def test_every_public_function_is_documented_with_its_signature() -> None:
    text, signatures = DOC.read_text(), _documented_signatures()
    missing = []
    for name, value in public().items():
        if inspect.isfunction(value) or inspect.ismethod(value):
            shown = "trace[name]" if name == "Trace.__getitem__" else plain_signature(name.split(".")[-1], value)
            if shown not in signatures and shown not in text:
                missing.append(shown)
        elif f"`{name.split('.')[-1]}`" not in text and f"`{name}`" not in text:
            missing.append(name)
    assert not missing, f"docs/python.md lacks: {missing}"


def test_every_signature_documented_is_the_codes() -> None:
    known = {plain_signature(name.split(".")[-1], value) for name, value in public().items()
             if inspect.isfunction(value) or inspect.ismethod(value)}
    names = {signature.split("(")[0] for signature in known}
    stale = []
    for shown in _documented_signatures():
        bare = re.sub(r"^(Model|Trace|plot)\.", "", shown)  # how the docs name a method or a figure
        if bare.split("(")[0] in names and bare not in known:
            stale.append(shown)
    assert not stale, f"docs/python.md gives signatures the code no longer has: {stale}"


def test_the_check_catches_a_changed_signature() -> None:
    def load(model, *, device="cpu"):
        return model

    assert plain_signature("load", load) == "load(model, *, device='cpu')"
    assert plain_signature("load", load) not in _documented_signatures()
