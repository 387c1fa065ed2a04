"""Run a model once and collect the values at chosen hook points.

Three kinds of tap (a place a hook's value is read from): the from-scratch model's HookPoints, which
report to the recorder the current thread switched on (model/core/capture/hooks.py); values that code inside a
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.attention.layer_inputs import PatternInputs
from attention_atlas.model.core.attention.row_reduction import ReducedRows
from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.attention.summary import THUMBNAIL_SIZE, SiteSummariser, SiteSummary
from attention_atlas.model.core.capture.hooks import HookPoint, ModuleTap, Reader, ReportedTap, recording
from attention_atlas.model.core.capture.host_copies import HostCopies, sixteen_bits
from attention_atlas.model.core.trace.sites import PATTERN_SUFFIX, Site

T = TypeVar("T")
HookSelection = str | Iterable[str] | Callable[[str], bool] | None  # None = every hook point


_progress = threading.local()  # .report: the current thread's `reporting_progress` callback, if any
_locks: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def model_lock(model: nn.Module) -> threading.RLock:
    """The lock that serialises forward-hook captures on `model` (and every pass of a spread model: its parts whose
    weights accelerate moves answer to it, `share_lock`). The one registry of the models' locks."""
    with _locks_guard:
        lock = _locks.get(model)
        if lock is None:
            lock = _locks[model] = threading.RLock()
        return lock


def share_lock(part: nn.Module, lock: threading.RLock) -> None:
    """Make `part` of a model answer to the model's `lock` (`lock_of`): a spread model's module whose weights its
    passes bring in and let go."""
    with _locks_guard:
        _locks[part] = lock


def lock_of(module: nn.Module) -> threading.RLock | None:
    """The lock `module` answers to, if it has one (a model captured with hooks, or a part of a spread model)."""
    with _locks_guard:
        return _locks.get(module)


@contextlib.contextmanager
def reporting_progress(report: Callable[[float, int], None]) -> Iterator[None]:
    """While open, every capture on this thread calls report(attention layers passed, attention layers kept) as its
    forward pass reaches each layer whose pattern it keeps: a run of 8,192 tokens takes most of a minute on the CPU,
    and a page can show how far it is. A capture that summarises a layer also reports as each block of its query rows
    is reduced, the layers passed then counting the layer's share of rows done (2.25: a quarter of the third layer's
    rows; a layer of 32,768 tokens takes tens of seconds). Whatever `report` raises stops the run there."""
    previous = getattr(_progress, "report", None)
    _progress.report = report
    try:
        yield
    finally:
        _progress.report = previous


def select_hook_names(available: Iterable[str], selection: HookSelection) -> list[str]:
    """The available names chosen by glob patterns ('*.hook_pattern'), exact names or a predicate."""
    names = list(available)
    if selection is None:
        return names
    if callable(selection):
        return [n for n in names if selection(n)]
    patterns = [selection] if isinstance(selection, str) else list(selection)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


Captured = np.ndarray | PatternSource | SiteSummary  # a site's summary under its site name ("decoder.attn")


def capture(
    model: nn.Module,
    taps: Mapping[str, HookPoint | nn.Module | ModuleTap | ReportedTap],
    selection: HookSelection,
    run: Callable[[], T],
    summarised: bool = False,
    ids: Mapping[str, Sequence[int]] | None = None,
) -> tuple[T, dict[str, Captured]]:
    """Call `run()` (one forward pass of `model`) under `torch.inference_mode()`, recording the
    selected taps. Returns run's result and {hook name: value as CPU numpy, batch dim kept}, in the
    order the forward pass reached them; a Hugging Face model's `hook_pattern` comes as a PatternSource
    (model/core/attention/source.py), computed when read. With `summarised`, each attention site whose patterns
    come so is also reduced on the model's device as each layer reports its pattern (model/core/attention/summary.py:
    thumbnails, statistics, rollout; batch row 0), under its site name, and in a run of one sequence
    the layer's attention output is computed from the probabilities that summary reads; `ids` ({stack: the token ids
    its self-attention reads, "encoder" or "decoder"}, run 0's) give the summary's induction targets. Every value, and a
    pattern's source, moves to the host as its layer reports it (model/core/capture/host_copies.py): a device holds
    no layer's after its own."""
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
    store: dict[str, np.ndarray | PatternSource] = {}  # in the order the forward pass reaches the taps
    copies = HostCopies()
    converted: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # the mask and bias every layer reads, converted once
    summarisers: dict[str, SiteSummariser] = {}
    scratch = Scratch()  # what every layer's summary computes its blocks in
    report = getattr(_progress, "report", None)
    patterns = {name for name in wanted_points if name.endswith(PATTERN_SUFFIX)}  # the layers `report` counts
    scaled: list[bool] = []  # whether the sources are kept in 16 bits (`sixteen_bits`), decided at the first layer

    def reported(blocks: Iterator[ReducedRows], q_len: int, report: Callable[[float, int], None]
                 ) -> Iterator[ReducedRows]:
        """A layer's blocks, each reported as it is reduced: the layers passed, and this one's share of rows."""
        passed = len(patterns & store.keys())
        for block in blocks:
            yield block
            report(passed + (block.start + block.thumbnail.shape[1]) / q_len, len(patterns))

    def keep(name: str, value: torch.Tensor) -> None:
        store[name] = copies.array(value)

    def record(name: str, value: torch.Tensor | PatternInputs) -> None:
        if name not in wanted_points:
            return
        if isinstance(value, PatternInputs):  # this layer's pattern: reduced, and on its way to the host, now
            source = value.source(converted)
            if summarised:
                site, _ = Site.of_pattern(name)
                if site.name not in summarisers:
                    queries = None if ids is None or site.is_cross else ids.get(site.stack)
                    summarisers[site.name] = SiteSummariser(source[0].shape, THUMBNAIL_SIZE, not site.is_cross,
                                                            queries)
                rows = value.summary_rows(source, summarisers[site.name].layout, scratch)
                q_len = value.query.size(-2)  # (batch, heads, q_len, d_head)
                summarisers[site.name].add_layer(rows if report is None else reported(rows, q_len, report))
            if not scaled:  # from the first layer's size, as if every layer's were as large
                scaled.append(sixteen_bits(4 * (source.query.numel() + source.key.numel()), len(patterns),
                                           value.query.dtype))
            store[name] = copies.source(source, value.query.dtype, scaled[0])
        else:
            keep(name, value)  # an inference-mode tensor: nothing to detach
        if report is not None and name in patterns:
            report(len(patterns & store.keys()), len(patterns))

    lock = model_lock(model) if module_taps else contextlib.nullcontext()
    with lock:
        handles = []
        try:
            for name, tap in module_taps.items():
                hook = _thread_hook(name, tap.read, keep)
                handles.append(tap.module.register_forward_hook(hook, with_kwargs=True))
            with recording(record, reports), torch.inference_mode():
                result = run()
        finally:
            for handle in handles:
                handle.remove()
    copies.wait()
    return result, {**store, **{site: summariser.result() for site, summariser in summarisers.items()}}


def _thread_hook(name: str, read: Reader, keep: Callable[[str, torch.Tensor], None]):
    """A forward hook that keeps `read(...)` under `name`, for calls from the registering thread only."""
    owner = threading.get_ident()

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if threading.get_ident() == owner:
            keep(name, read(args, kwargs, output).detach())

    return hook
