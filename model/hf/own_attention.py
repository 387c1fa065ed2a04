"""The second capture path: attention that a family computes in its own code (BLOOM, Falcon, GPT-Neo, DeBERTa-v2),
not through transformers' attention interface, made to go through the app's attention function (model/hf/heads.py).

Such a model is loaded with transformers' eager attention (its modules' own code has no other way in). Its family's
adapter (model/hf/families/) then gives each of its attention modules a forward of the adapter's: the module's own
projections, head split, rotation, cache and output projection, and, for softmax(Q K^T x scale + bias + M) V, the
app's `attention` with the module's scale and position bias. The module then reports what every other family's
reports (the per-head values, the pattern's source, the summary, the sliding window) and takes the same edits
(ablation, patching), at the same cost: nothing when nothing is asked. The shared model is changed once, when it
loads, never per run. tests/model/test_model_types.py holds each such family to the model's own eager attention.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from torch import nn

ROUTED = "_atlas_routed"  # a routed module's own methods, by attribute, kept in its __dict__


def route(module: nn.Module, method: Callable[..., Any], name: str = "forward") -> None:
    """Make `method(module, ...)` the method `name` of `module` (this instance only). Where accelerate spread the model
    (model/hf/placement.py) its hook wraps the forward it found as `_old_forward`: that one is replaced."""
    bound = types.MethodType(method, module)
    attribute = "_old_forward" if name == "forward" and hasattr(module, "_old_forward") else name
    module.__dict__.setdefault(ROUTED, {}).setdefault(attribute, getattr(module, attribute))  # the family's own
    setattr(module, attribute, bound)


def use_original_methods(model: nn.Module) -> list[tuple[nn.Module, str, Any]]:
    """Give every routed module of `model` back its family's own methods (transformers' eager attention, for
    model/hf/proof.py); returns (module, attribute, the app's method) for each, to put back with setattr."""
    swapped = []
    for module in model.modules():
        for attribute, original in module.__dict__.get(ROUTED, {}).items():
            swapped.append((module, attribute, getattr(module, attribute)))
            setattr(module, attribute, original)
    return swapped


def route_modules(model: nn.Module, class_name: str, forward: Callable[..., Any]) -> int:
    """`route` every module of `model` whose class is named `class_name`; how many."""
    found = [module for module in model.modules() if type(module).__name__ == class_name]
    for module in found:
        route(module, forward)
    return len(found)
