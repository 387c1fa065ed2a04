"""Activation patching and gradients on NDIF, with the meaning of a local run's (model/core/capture/patching.py,
model/hf/patching.py): a value of the clean run put into a row of the corrupted run's batch where the hook reads it
(a block's input for `hook_resid_pre`, a module's output for `hook_attn_out` and `hook_mlp_out`, the attention
function's output at one head for `attn.hook_z`), and the gradient of a metric of the logits with respect to those
values, in one forward and backward pass on NDIF (nnsight's `backward`; NDIF refuses it for a model it serves without
gradients, and says so). The metric travels with the request by value (a lambda's code and numbers); one that names
this project's code is refused before it is sent, as NDIF's servers would refuse it (model/ndif/backends.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.taps import first_input, first_output, output
from attention_atlas.model.ndif.remote import Patches, Site
from attention_atlas.model.ndif.twin import Probe

Taps = Mapping[str, ModuleTap | ReportedTap]


def site_of(taps: Taps, paths: Mapping[nn.Module, str], name: str) -> Site:
    """Where hook `name`'s value is in a pass; UserError for a hook this model has not, or whose value is computed
    from its module's values rather than read as one of them (as a local model's patching refuses it)."""
    tap = taps.get(name)
    if isinstance(tap, ReportedTap) and tap.quantity == "z":
        return paths[tap.module], "z"
    if isinstance(tap, ModuleTap) and tap.read is first_input:
        return paths[tap.module], "input"
    if isinstance(tap, ModuleTap) and tap.read in (first_output, output):
        return paths[tap.module], "output"
    if tap is None:
        raise UserError(f"This model has no {name} to patch.")
    raise UserError(f"On NDIF, patching and gradients reach a head's output (attn.hook_z) and the values a module "
                    f"reads or writes whole (hook_resid_pre, hook_attn_out, hook_mlp_out …); {name} is neither.")


def in_order(sites: Sequence[Site], probe: Probe) -> list[Site]:
    """`sites` without repeats, in the order a forward pass reaches them (nnsight's rule: a request reads them so)."""
    return sorted(dict.fromkeys(sites), key=lambda site: probe.order[(site[0], "attention" if site[1] == "z"
                                                                      else site[1])])


def patch_steps(taps: Taps, paths: Mapping[nn.Module, str], probe: Probe, rows: Sequence[Patch | None],
                clean: Mapping[str, np.ndarray]) -> Patches:
    """The values to put in place for a batch whose row b is patched with `rows[b]` (None: left as it is), each taken
    from `clean` (hook name -> the clean run's value, batch removed): only the part a row puts in."""
    puts: dict[Site, list[tuple[int, int | None, int | None, torch.Tensor]]] = {}
    for row, patch in enumerate(rows):
        if patch is None:
            continue
        if patch.hook not in clean:
            raise UserError(f"The clean run has no {patch.hook} to patch in.")
        value = clean[patch.hook] if patch.head is None else clean[patch.hook][patch.head]  # (positions, d)
        value = value if patch.position is None else value[patch.position]
        puts.setdefault(site_of(taps, paths, patch.hook), []).append(
            (row, patch.position, patch.head, torch.tensor(np.asarray(value))))
    return [(path, part, puts[(path, part)]) for path, part in in_order(list(puts), probe)]


def gradient_ask(taps: Taps, paths: Mapping[nn.Module, str], probe: Probe, hooks: Sequence[str], position: int,
                 metric: Callable[[torch.Tensor], torch.Tensor]) -> tuple[list[Site], int, Any]:
    """What a request for the gradient of `metric` with respect to `hooks` asks (`Ask.gradient`)."""
    return in_order([site_of(taps, paths, name) for name in hooks], probe), position, metric


def gradients_by_hook(taps: Taps, paths: Mapping[nn.Module, str], hooks: Sequence[str], sites: Sequence[Site],
                      found: Sequence[torch.Tensor]) -> dict[str, np.ndarray]:
    """Each hook's gradient, shaped as the trace holds its value (a z's (heads, positions, d_head)), from the
    gradients a request read at `sites`."""
    at = dict(zip(sites, found, strict=True))
    gradients = {}
    for name in hooks:
        site = site_of(taps, paths, name)
        grad = at[site].float()
        gradients[name] = (grad.transpose(0, 1) if site[1] == "z" else grad).numpy()
    return gradients
