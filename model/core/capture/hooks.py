"""Identity modules that mark the places whose values can be captured.

A HookPoint hands its value to the recorder that the current thread has switched on with
`recording(...)` (see model/core/capture/record.py) and returns it unchanged. Because the recorder belongs to
the thread, two sessions running one shared model at the same time never see each other's values,
and the check costs a fraction of a microsecond, far less than registering and dispatching a
PyTorch forward hook on every point (bench/capture.py). Ordinary `register_forward_hook` works on
HookPoints too, for anyone who wants to intervene.

Code that computes a value only when someone keeps it (the Hugging Face attention function of
model/hf/heads.py) asks `reports_wanted(module)` which values the thread's capture wants from it, and
hands those to the same recorder under their hook names.

Interventions (a head's output zeroed, model/core/capture/ablation.py) work the same way: `editing(...)` gives the
thread a replacement function for some hook points (by name) and reported values (by module and quantity);
the value is replaced where it is computed, before any recorder sees it, for that thread only. The shared
model's weights and modules are never changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

Recorder = Callable[[str, torch.Tensor], None]
Reader = Callable[[tuple[Any, ...], dict[str, Any], Any], torch.Tensor]  # a module's (args, kwargs, output) -> a value
Reports = Mapping[nn.Module, Mapping[str, str]]  # module -> {the quantity it reports: hook name}
Edit = Callable[[torch.Tensor], torch.Tensor]  # a value -> its replacement (same shape)
PointEdits = Mapping[str, Edit]  # hook point name -> its edit
ReportedEdits = Mapping[nn.Module, Mapping[str, Edit]]  # module -> {quantity computed in its forward: edit}
_active = threading.local()  # .recorder, .reports, .point_edits, .reported_edits of the current thread (absent: none)
_NOTHING: Mapping[str, str] = {}


class HookPoint(nn.Module):
    """Returns its input unchanged, after showing it to the thread's active recorder.

    `name` is the model-wide hook name (e.g. ``encoder.0.attn.hook_pattern``), set by
    `name_hook_points` once the model is built.
    """

    def __init__(self) -> None:
        super().__init__()
        self.name = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        edits = getattr(_active, "point_edits", None)
        if edits and self.name in edits:
            x = edits[self.name](x)
        recorder = getattr(_active, "recorder", None)
        if recorder is not None:
            recorder(self.name, x)
        return x


@contextmanager
def _for_this_thread(**values: object) -> Iterator[None]:
    """Set these attributes of the thread's state while inside, then put back what was there."""
    previous = {name: getattr(_active, name, None) for name in values}
    for name, value in values.items():
        setattr(_active, name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            setattr(_active, name, value)


def recording(recorder: Recorder, reports: Reports | None = None) -> AbstractContextManager[None]:
    """While inside, every HookPoint run by this thread calls `recorder(name, value)`, and so does code that
    reports values (`reports_wanted`) for the quantities `reports` asks of its module."""
    return _for_this_thread(recorder=recorder, reports=reports)


def editing(point_edits: PointEdits, reported_edits: ReportedEdits) -> AbstractContextManager[None]:
    """While inside, this thread's forward passes replace the values of the named hook points, and the quantities
    that modules compute and report (model/hf/heads.py), by their edits. Other threads see the model unchanged."""
    return _for_this_thread(point_edits=point_edits, reported_edits=reported_edits)


def reported_edit(module: nn.Module, quantity: str) -> Edit | None:
    """The edit this thread applies to `quantity` computed inside `module`'s forward (None: leave it as it is)."""
    edits = getattr(_active, "reported_edits", None)
    return edits.get(module, _NOTHING).get(quantity) if edits else None


def active_recorder() -> Recorder | None:
    """This thread's recorder (None outside `recording`)."""
    return getattr(_active, "recorder", None)


def reports_wanted(module: nn.Module) -> Mapping[str, str]:
    """{quantity: hook name} that this thread's capture wants `module` to report (empty: nothing; compute nothing)."""
    reports = getattr(_active, "reports", None)
    return reports.get(module, _NOTHING) if reports else _NOTHING


def hook_name(module_path: str) -> str:
    """Module path -> hook name: layer lists are numbered directly (``encoder.layers.0`` -> ``encoder.0``)."""
    return module_path.replace("layers.", "")


def name_hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Give every HookPoint in `model` its hook name and return them by name."""
    points: dict[str, HookPoint] = {}
    for path, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = hook_name(path)
            points[module.name] = module
    return points


def _read_output(args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> torch.Tensor:
    return output


@dataclass(frozen=True)
class ModuleTap:
    """A module to hook and how to read the captured tensor from its (args, kwargs, output)."""

    module: nn.Module
    read: Reader = _read_output


@dataclass(frozen=True)
class ReportedTap:
    """A value that code running inside `module`'s forward reports itself, as `quantity`, and computes
    only when the capturing thread asks for it (model/core/capture/hooks.py `reports_wanted`)."""

    module: nn.Module
    quantity: str
