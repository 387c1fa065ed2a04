"""What crosses the wire for one run, and how it becomes the capture a local run makes.

`plan` turns the hooks a run asks for (and the heads it ablates) into the steps of model/ndif/remote.py, in the
order the forward pass reaches them (the twin's, model/ndif/twin.py): for a hook read off a module, the part of it
its reader needs; for an attention layer whose values are wanted (its pattern, queries, keys, scores, z), the queries
and keys its attention function was handed (after the rotation), and the values only where v or z is asked for. A
run that summarises its site and asks only for the patterns (the app's frame) has each layer summarised on NDIF
("summary": model/ndif/remote_summary.py) and its queries and keys fetched when a view opens it (`fetch_plan`).

`replay` hands what came back to the same capture as a local run (model/core/capture/record.py): each module's reader
reads it through a stand-in module that returns the fetched output, and each attention layer's values go through the
app's own attention function (model/hf/heads.py) under the run's mask, which reports them as it does in a local run:
patterns kept as their sources, summarised here (the native kernel stays local), z computed from the values, the heads
ablated where the run ablates them. The meaning of every hook is thus the local run's, and the twin proves the map.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.capture.ablation import ablating
from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.record import Captured, capture, select_hook_names
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import additive_mask
from attention_atlas.model.core.options import ABLATION_MODES, Head, RunOptions
from attention_atlas.model.hf.chunks import chunk_size
from attention_atlas.model.hf.heads import attention
from attention_atlas.model.ndif.twin import Probe, stand_in

VALUES = {"value", "z"}  # what an attention layer reports that needs its values to come back
Taps = Mapping[str, ModuleTap | ReportedTap]
Edits = dict[str, tuple[tuple[tuple[int, int], ...], str]]  # as model/ndif/remote.py takes them


@dataclass(frozen=True)
class Plan:
    """One run's steps for model/ndif/remote.py and what each serves."""

    steps: list[tuple[str, str]]  # (module path, part), in the forward pass's order
    hooks: list[str]  # the hook names the run records from what its steps bring back (`replay`)
    edits: Edits  # attention module path -> ((row, head) ablated ..., "zero" | "mean"), in the forward pass's order
    fetched: dict[str, str] = field(default_factory=dict)  # pattern hook name -> its attention module's path: the
    # layers summarised on NDIF ("summary" steps), whose queries and keys a view fetches when it opens them


def plan(taps: Taps, paths: Mapping[nn.Module, str], probe: Probe, options: RunOptions, n_heads: int) -> Plan:
    """The steps that bring back what `options` asks for: its hooks (the ones the wire can carry: `carried`) and its
    ablated heads; each layer summarised on NDIF where the run summarises and reads only patterns
    (`summarised_on_ndif`)."""
    hooks = select_hook_names(carried(taps, probe), options.hooks)
    parts: dict[tuple[str, str], None] = {}
    attentions: dict[str, str] = {}  # attention module path -> "attention" or "attention+values"
    read: dict[str, set[str]] = {}  # attention module path -> what its hooks read
    for name in hooks:
        tap = taps[name]
        path = paths[tap.module]
        if isinstance(tap, ReportedTap):
            wants_values = tap.quantity in VALUES or attentions.get(path) == "attention+values"
            attentions[path] = "attention+values" if wants_values else "attention"
            read.setdefault(path, set()).add(tap.quantity)
        else:
            parts.update({(path, part): None for part in probe.parts[name]})
    fetched = {}
    if summarised_on_ndif(options, read, {path: module for module, path in paths.items()}):
        fetched = {name: paths[taps[name].module] for name in hooks if isinstance(taps[name], ReportedTap)}
        attentions = dict.fromkeys(attentions, "summary")
    edits = _edits(taps, paths, [(-1, head) for head in options.ablated], options.ablation, n_heads)
    parts.update({(path, attentions.get(path, "edit")): None for path in {*attentions, *edits}})

    def place(step: tuple[str, str]) -> int:
        path, part = step
        return probe.order[(path, part if part in ("input", "output") else "attention")]

    ordered_edits = {path: edits[path] for path in sorted(edits, key=lambda path: place((path, "edit")))}
    return Plan(sorted(parts, key=place), [name for name in hooks if name not in fetched], ordered_edits, fetched)


def summarised_on_ndif(options: RunOptions, read: Mapping[str, set[str]], modules: Mapping[str, nn.Module]) -> bool:
    """Whether a run's attention layers are summarised on NDIF: it summarises, its attention hooks are patterns
    alone, and no layer attends within chunks (Llama 4's: model/ndif/remote_summary.py knows the causal mask and
    sliding windows only)."""
    return options.summarised and bool(read) and all(quantities == {"pattern"} for quantities in read.values()) \
        and not any(chunk_size(modules[path]) for path in read)


def fetch_plan(chosen: Plan, name: str, probe: Probe) -> Plan:
    """The steps that bring back the queries and keys of the layer of `chosen`'s pattern hook `name` (one its run
    summarised on NDIF), under the run's edits."""
    path = chosen.fetched[name]
    steps = {(path, "attention"): None} | {(edited, "edit"): None for edited in chosen.edits if edited != path}
    return Plan(sorted(steps, key=lambda step: probe.order[(step[0], "attention")]), [name], chosen.edits)


def carried(taps: Taps, probe: Probe) -> list[str]:
    """The hook names a run on NDIF can record: every reported attention value, and every module hook whose reader
    the twin showed to read what the wire brings."""
    return [name for name, tap in taps.items() if isinstance(tap, ReportedTap) or name in probe.parts]


def _edits(taps: Taps, paths: Mapping[nn.Module, str], heads: Sequence[tuple[int, Head]], mode: str,
           n_heads: int) -> Edits:
    """The (row, head) pairs to ablate by attention module path (their site's hook_z tap; row -1: every row), in any
    order; UserError for a head the model does not have, before anything is sent."""
    if heads and mode not in ABLATION_MODES:
        raise UserError(f"Unknown ablation {mode!r}: choose one of {', '.join(ABLATION_MODES)}.")
    pairs: dict[str, list[tuple[int, int]]] = {}
    for row, (site, head) in heads:
        tap = taps.get(f"{site}.hook_z")
        if not isinstance(tap, ReportedTap) or not 0 <= head < n_heads:
            raise UserError(f"This model has no head {head} at {site} (its heads: 0–{n_heads - 1}).")
        pairs.setdefault(paths[tap.module], []).append((row, int(head)))
    return {path: (tuple(chosen), mode) for path, chosen in pairs.items()}


def row_edits(taps: Taps, paths: Mapping[nn.Module, str], probe: Probe, rows: Sequence[Sequence[Head]], mode: str,
              n_heads: int) -> Plan:
    """The steps of a batch whose row b ablates the heads `rows[b]` and reads nothing (ablation's outcomes)."""
    edits = _edits(taps, paths, [(row, head) for row, heads in enumerate(rows) for head in heads], mode, n_heads)
    steps = sorted(((path, "edit") for path in edits), key=lambda step: probe.order[(step[0], "attention")])
    return Plan(steps, [], {path: edits[path] for path, _ in steps})


class _StandIn(nn.Module):
    """A module's stand-in in a replay: called with the fetched input, it returns the fetched output, so that the
    forward hook a capture puts on it reads them as the module's own."""

    def __init__(self) -> None:
        super().__init__()
        self.output: Any = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.output


def replay(taps: Taps, paths: Mapping[nn.Module, str], probe: Probe, chosen: Plan, found: Sequence[Any],
           options: RunOptions, mask: torch.Tensor, n_heads: int, ids: dict[str, list[int]]) -> dict[str, Captured]:
    """The capture of `chosen`'s hooks from what its steps brought back (`found`, one value a step), the attention
    layers under `mask` (1, 1, len, len) bool, True = may attend."""
    fetched = dict(zip(chosen.steps, found, strict=True))
    stand_ins: dict[str, _StandIn] = {}
    local: dict[str, ModuleTap | ReportedTap] = {}
    for name in chosen.hooks:
        tap = taps[name]
        if isinstance(tap, ModuleTap):
            local[name] = ModuleTap(stand_ins.setdefault(paths[tap.module], _StandIn()), tap.read)
        else:
            local[name] = tap
    modules = {paths[t.module]: t.module for t in taps.values() if isinstance(t, ReportedTap)}
    calls = _calls(chosen, probe, stand_ins, modules, fetched, mask)
    holder = nn.ModuleDict({str(i): module for i, module in enumerate(stand_ins.values())})
    with ablating(taps, options.ablated, options.ablation, n_heads):
        _, captured = capture(holder, local, chosen.hooks, lambda: [call() for _, call in sorted(calls)],
                              options.summarised, ids)
    return captured


def _calls(chosen: Plan, probe: Probe, stand_ins: dict[str, _StandIn], modules: dict[str, nn.Module],
           fetched: dict[tuple[str, str], Any], mask: torch.Tensor) -> list[tuple[int, Callable[[], Any]]]:
    """Each stand-in's call at its module's output and each attention call at its own place in the forward pass."""
    calls: list[tuple[int, Callable[[], Any]]] = []
    for path, module in stand_ins.items():
        out, given = fetched.get((path, "output")), fetched.get((path, "input"))
        calls.append((probe.order[(path, "output")], _module_call(module, out, given)))
    for (path, part), value in fetched.items():
        if part.startswith("attention"):
            calls.append((probe.order[(path, "attention")], _attention_call(modules[path], value, mask)))
    return calls


def _module_call(module: _StandIn, out: Any, given: torch.Tensor | None) -> Callable[[], Any]:
    def call() -> Any:
        module.output = out
        return module(given if given is not None else stand_in(out))

    return call


def _attention_call(module: nn.Module, value: tuple[Any, ...], allowed: torch.Tensor) -> Callable[[], Any]:
    """The app's attention function called as the model called it: (query, key, values or zeros without memory,
    the call's numbers), under the run's mask made additive in the queries' dtype."""
    query, key, values, numbers = value

    def call() -> Any:
        kept = values if values is not None else torch.zeros((), dtype=key.dtype).expand(key.shape)
        return attention(module, query, key, kept, additive_mask(allowed, query.dtype), **_named(numbers))

    return call


def _named(numbers: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in numbers.items() if name not in ("dropout", "use_cache")}
