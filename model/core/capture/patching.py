"""Activation patching: one activation of a clean run put into a corrupted run, a different one in each row of a
batch, on the running thread only (another session running the same model sees it whole).

A patch names a hook and where: `decoder.3.hook_resid_pre` at position 5 (the residual stream going into layer 3), a
block's `hook_attn_out` or `hook_mlp_out` at a position, or one head's `attn.hook_z` at every position (its output
before W_O), as TransformerLens's `patching` module patches them. The clean values come from the clean run's trace.

Where the value is taken from decides how it is replaced: a from-scratch model's HookPoint and a Hugging Face
attention's reported z through `editing` (model/core/capture/hooks.py); a Hugging Face module's input or output by
hooks registered for the pass (model/hf/patching.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from attention_atlas.model.core.capture.hooks import Edit, HookPoint, ModuleTap, ReportedTap, editing
from attention_atlas.model.core.errors import UserError


@dataclass(frozen=True)
class Patch:
    """One activation to patch: `hook` at `position` (None: every position), of head `head` (hook_z only)."""

    hook: str
    position: int | None = None
    head: int | None = None


def _edit(rows: list[tuple[int, Patch]], clean: np.ndarray) -> Edit:
    """value (batch, pos, d) or z (batch, heads, pos, d_head) with each row's patch taken from `clean` (no batch)."""
    converted: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def edit(value: torch.Tensor) -> torch.Tensor:
        key = (value.device, value.dtype)
        if key not in converted:
            converted[key] = torch.as_tensor(clean).to(device=value.device, dtype=value.dtype)
        source, value = converted[key], value.clone()
        for row, patch in rows:
            where = (row,) if patch.head is None else (row, patch.head)
            taken = source if patch.head is None else source[patch.head]
            if patch.position is None:
                value[where] = taken
            else:
                value[(*where, Ellipsis, patch.position, slice(None))] = taken[..., patch.position, :]
        return value

    return edit


Edits = tuple[dict[str, Edit], dict[object, dict[str, Edit]], list[tuple[ModuleTap, Edit]]]  # by hook point, by
# reported quantity (module -> {quantity: edit}), and by module tap


def patch_edits(taps: Mapping[str, object], rows: Sequence[Patch | None], clean: Mapping[str, np.ndarray]) -> Edits:
    """The edits that patch row b of a batch with `rows[b]` (None: left as it is), each value taken from `clean`
    (hook name -> the clean run's value, batch removed)."""
    by_hook: dict[str, list[tuple[int, Patch]]] = defaultdict(list)
    for row, patch in enumerate(rows):
        if patch is not None:
            by_hook[patch.hook].append((row, patch))
    missing = [name for name in by_hook if name not in clean]
    if missing:
        raise UserError(f"The clean run has no {', '.join(missing)} to patch in.")
    return edits_by_tap(taps, {name: _edit(hook_rows, clean[name]) for name, hook_rows in by_hook.items()})


def edits_by_tap(taps: Mapping[str, object], edits: Mapping[str, Edit]) -> Edits:
    """Edits by hook name, sorted by where each hook's value is taken from: a hook point, a quantity a module reports,
    or a module's input or output (model/hf/patching.py edits those)."""
    point_edits: dict[str, Edit] = {}
    reported_edits: dict[object, dict[str, Edit]] = {}
    module_edits: list[tuple[ModuleTap, Edit]] = []
    for name, edit in edits.items():
        tap = taps.get(name)
        if isinstance(tap, HookPoint):
            point_edits[name] = edit
        elif isinstance(tap, ReportedTap):
            reported_edits.setdefault(tap.module, {})[tap.quantity] = edit
        elif isinstance(tap, ModuleTap):
            module_edits.append((tap, edit))
        else:
            raise UserError(f"This model has no {name} to patch.")
    return point_edits, reported_edits, module_edits


@contextmanager
def patching_rows(taps: Mapping[str, object], rows: Sequence[Patch | None],
                  clean: Mapping[str, np.ndarray]) -> Iterator[None]:
    """While inside, this thread's batched passes of a from-scratch model (whose hooks are all hook points) patch
    row b with `rows[b]` (`patch_edits`)."""
    with point_editing(patch_edits(taps, rows, clean)):
        yield


def point_editing(edits: Edits) -> AbstractContextManager[None]:
    """`editing` for a from-scratch model, whose hooks are all hook points."""
    point_edits, reported_edits, module_edits = edits
    if module_edits:
        raise UserError("This model's hooks are read from its modules: edit it with model/hf/patching.py.")
    return editing(point_edits, reported_edits)


def metric_gradients(editing_for: Callable[[Edits], AbstractContextManager[None]], taps: Mapping[str, object],
                     hooks: Sequence[str], logits: Callable[[], torch.Tensor],
                     metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
    """The gradient of `metric(logits())` with respect to each hook's value in that pass (batch removed, as a trace
    holds the values), each value kept through the edits `editing_for` applies. `logits()` runs the model once
    (its parameters need no gradient: nothing of a shared model changes); a difference of log-probabilities has
    the gradient of the difference of logits."""
    kept: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> Edit:
        def keep(value: torch.Tensor) -> torch.Tensor:
            if not value.requires_grad:  # parameters that need no gradient: the first value kept starts the graph
                value = value.detach().requires_grad_()
            kept[name] = value
            return value

        return keep

    with editing_for(edits_by_tap(taps, {name: keeper(name) for name in hooks})), torch.enable_grad():
        found = torch.autograd.grad(metric(logits().float()), [kept[name] for name in hooks])
    return {name: grad[0].float().cpu().numpy() for name, grad in zip(hooks, found, strict=True)}
