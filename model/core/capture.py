"""Run a model once and collect the values at chosen hook points.

Three kinds of tap (a place a hook's value is read from): the from-scratch model's HookPoints, which
report to the recorder the current thread switched on (model/core/hooks.py); values that code inside a
module's forward reports to that same recorder when asked (ReportedTap: the per-head values of Hugging
Face attention, model/hf/heads.py); and any other module (a Hugging Face layer), on which a PyTorch
forward hook is registered for the one pass and removed in `finally`. All are safe on a model shared
by several sessions: recorders and what they ask for belong to a thread, and forward hooks are
registered under a per-model lock and record only calls from the thread that registered them, so a
forward pass running elsewhere at the same time never writes into this capture.
"""

from __future__ import annotations

import contextlib
import fnmatch
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from model.core.hooks import HookPoint, recording
from model.core.patterns import PatternInputs, PatternSource
from model.core.summary import SiteSummary, summarise_sources

T = TypeVar("T")
HookSelection = str | Iterable[str] | Callable[[str], bool] | None  # None = every hook point
Reader = Callable[[tuple[Any, ...], dict[str, Any], Any], torch.Tensor]


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
    only when the capturing thread asks for it (model/core/hooks.py `reports_wanted`)."""

    module: nn.Module
    quantity: str


_locks: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def model_lock(model: nn.Module) -> threading.RLock:
    """The lock that serialises forward-hook captures on `model`."""
    with _locks_guard:
        lock = _locks.get(model)
        if lock is None:
            lock = _locks[model] = threading.RLock()
        return lock


def select_hook_names(available: Iterable[str], selection: HookSelection) -> list[str]:
    """The available names chosen by glob patterns ('*.hook_pattern'), exact names or a predicate."""
    names = list(available)
    if selection is None:
        return names
    if callable(selection):
        return [n for n in names if selection(n)]
    patterns = [selection] if isinstance(selection, str) else list(selection)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


_NOT_IN_NUMPY = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def host_arrays(tensors: Iterable[torch.Tensor]) -> dict[int, np.ndarray]:
    """{id(tensor): CPU numpy array} for these tensors, moved in one batch. A CPU tensor is shared, not copied; a
    CUDA tensor is copied into pinned memory without waiting, and the copies are waited for once (one synchronous
    copy per tensor into pageable memory cost 10x on an H100); types numpy lacks (bfloat16) become float32 first,
    on their device."""
    out: dict[int, np.ndarray] = {}
    copying: set[torch.device] = set()  # the GPUs copies were started from
    for tensor in tensors:
        if id(tensor) in out:
            continue
        moved = tensor.detach()
        if moved.dtype in _NOT_IN_NUMPY:
            moved = moved.float()
        if moved.is_cuda:
            host = torch.empty(moved.shape, dtype=moved.dtype, pin_memory=True)
            host.copy_(moved, non_blocking=True)
            copying.add(moved.device)
            moved = host
        out[id(tensor)] = moved.cpu().numpy()  # CPU: a view; MPS and others: a copy
    for device in copying:
        torch.cuda.synchronize(device)
    return out


Captured = np.ndarray | PatternSource | SiteSummary  # a site's summary under its site name ("decoder.attn")


def capture(
    model: nn.Module,
    taps: Mapping[str, HookPoint | nn.Module | ModuleTap | ReportedTap],
    selection: HookSelection,
    run: Callable[[], T],
    summary_size: int = 0,
) -> tuple[T, dict[str, Captured]]:
    """Call `run()` (one forward pass of `model`) under `torch.inference_mode()`, recording the
    selected taps. Returns run's result and {hook name: value as CPU numpy, batch dim kept}, in the
    order the forward pass reached them; a Hugging Face model's `hook_pattern` comes as a PatternSource
    (model/core/patterns.py), computed when read. With `summary_size`, each attention site whose patterns
    come so is also reduced on the model's device before anything moves to the host (model/core/summary.py:
    thumbnails of that side, statistics, rollout; batch row 0), under its site name."""
    wanted_points: set[str] = set()  # names reported to the recorder: HookPoints and ReportedTaps
    reports: dict[nn.Module, dict[str, str]] = {}  # module -> {quantity: hook name}
    module_taps: dict[str, ModuleTap] = {}
    for name in select_hook_names(taps, selection):
        tap = taps[name]
        if isinstance(tap, HookPoint):
            wanted_points.add(name)
        elif isinstance(tap, ReportedTap):
            wanted_points.add(name)
            reports.setdefault(tap.module, {})[tap.quantity] = name
        else:
            module_taps[name] = tap if isinstance(tap, ModuleTap) else ModuleTap(tap)
    store: dict[str, torch.Tensor | PatternInputs] = {}  # in the order the forward pass reaches the taps

    def record(name: str, value: torch.Tensor) -> None:
        if name in wanted_points:
            store[name] = value  # an inference-mode tensor: nothing to detach

    lock = model_lock(model) if module_taps else contextlib.nullcontext()
    with lock:
        handles = []
        try:
            for name, tap in module_taps.items():
                hook = _thread_hook(name, tap.read, store)
                handles.append(tap.module.register_forward_hook(hook, with_kwargs=True))
            with recording(record, reports), torch.inference_mode():
                result = run()
        finally:
            for handle in handles:
                handle.remove()
    shared: dict[int, torch.Tensor] = {}  # the mask and bias every layer reads, converted once
    on_device = {name: value.source(shared) if isinstance(value, PatternInputs) else value
                 for name, value in store.items()}
    sources = {name: value for name, value in on_device.items() if isinstance(value, PatternSource)}
    summaries = summarise_sources({name: source[0] for name, source in sources.items()}, summary_size) \
        if summary_size and sources else {}
    host = host_arrays(tensor for value in on_device.values()
                       for tensor in (value.arrays() if isinstance(value, PatternSource) else [value]))
    return result, {**{name: _on_host(value, host) for name, value in on_device.items()}, **summaries}


def _on_host(value: torch.Tensor | PatternSource, host: dict[int, np.ndarray]) -> np.ndarray | PatternSource:
    """A captured value with its tensors replaced by their host arrays (a source then computes on its device)."""
    if not isinstance(value, PatternSource):
        return host[id(value)]
    return replace(value, query=host[id(value.query)], key=host[id(value.key)], allowed=host[id(value.allowed)],
                   bias=None if value.bias is None else host[id(value.bias)])


def _thread_hook(name: str, read: Reader, store: dict[str, torch.Tensor]):
    """A forward hook that stores `read(...)` under `name`, for calls from the registering thread only."""
    owner = threading.get_ident()

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if threading.get_ident() == owner:
            store[name] = read(args, kwargs, output).detach()

    return hook
