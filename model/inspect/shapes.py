"""The shape trace: every module one forward pass went through, in the order it was entered, with the shapes
of what went in and came out and its parameters. Forward hooks on every module for the one pass, registered
under the model's capture lock, recording only the calling thread's pass, removed in `finally`."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import nn

from attention_atlas.model.core.capture.record import model_lock

LAYER_IN_PATH = re.compile(r"(?:^|\.)(?:layers?|h|block)\.(\d+)(?:\.|$)")
STACK_IN_PATH = re.compile(r"(?:^|\.)(encoder|decoder)(?:\.|$)")


@dataclass(frozen=True)
class ModuleCall:
    """One call of one module."""

    order: int  # when it was entered (0 = first)
    depth: int  # how deep in the module tree (the model itself: 0)
    path: str  # "decoder.layers.0.attn.w_q"
    kind: str  # its class, "Linear"
    inputs: str  # the shapes of its tensor inputs, "(1, 12, 64)"
    output: str  # the shapes of its tensor outputs
    params: int  # its own parameters (not its children's)
    leaf: bool  # a module without children
    stack: str  # "encoder", "decoder" or "" (read from the path)
    layer: int | None  # the layer number in the path, if any


def shapes_of(value: Any) -> str:
    """Tensor shapes in a value (a tensor, tuple, list, dict or model output), comma separated; others left out."""
    if isinstance(value, torch.Tensor):
        return "(" + ", ".join(str(d) for d in value.shape) + ")"
    if isinstance(value, dict) or hasattr(value, "to_tuple"):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return ", ".join(s for s in (shapes_of(v) for v in value) if s)
    return ""


def shape_trace(model: nn.Module, run: Callable[[], Any]) -> list[ModuleCall]:
    """Call `run()` (one forward pass of `model`) under inference mode and list every module call."""
    modules = dict(model.named_modules())
    calls: list[ModuleCall] = []
    entered: dict[int, list[int]] = {}  # id(module) -> indices into `calls` awaiting their output
    owner = threading.get_ident()

    def before(path: str, module: nn.Module) -> Callable:
        def hook(mod: nn.Module, args: tuple, kwargs: dict) -> None:
            if threading.get_ident() == owner:
                entered.setdefault(id(mod), []).append(len(calls))
                calls.append(_call(len(calls), path, mod, shapes_of([*args, *kwargs.values()])))
        return hook

    def after(mod: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if threading.get_ident() == owner and entered.get(id(mod)):
            index = entered[id(mod)].pop()
            calls[index] = _with_output(calls[index], shapes_of(output))

    with model_lock(model):
        handles = []
        try:
            for path, module in modules.items():
                handles.append(module.register_forward_pre_hook(before(path, module), with_kwargs=True))
                handles.append(module.register_forward_hook(after, with_kwargs=True))
            with torch.inference_mode():
                run()
        finally:
            for handle in handles:
                handle.remove()
    return calls


def _call(order: int, path: str, module: nn.Module, inputs: str) -> ModuleCall:
    layer = LAYER_IN_PATH.search(path)
    stack = STACK_IN_PATH.search(path)
    return ModuleCall(order=order, depth=path.count(".") + 1 if path else 0, path=path or "(model)",
                      kind=type(module).__name__, inputs=inputs, output="",
                      params=sum(p.numel() for p in module.parameters(recurse=False)),
                      leaf=not any(True for _ in module.children()), stack=stack.group(1) if stack else "",
                      layer=int(layer.group(1)) if layer else None)


def _with_output(call: ModuleCall, output: str) -> ModuleCall:
    return ModuleCall(**{**call.__dict__, "output": output})


def calls_table(calls: list[ModuleCall]) -> pd.DataFrame:
    """One row per module call, in order (columns named for a person; `itertuples` names: input_shapes...)."""
    return pd.DataFrame({
        "order": [c.order for c in calls], "stack": [c.stack for c in calls],
        "layer": pd.array([c.layer for c in calls], dtype="Int64"), "module": [c.path for c in calls],
        "type": [c.kind for c in calls], "input_shapes": [c.inputs for c in calls],
        "output_shape": [c.output for c in calls], "parameters": [c.params for c in calls],
        "leaf": [c.leaf for c in calls], "depth": [c.depth for c in calls],
    }).set_index("order")
