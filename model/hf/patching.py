"""Activation patching in a Hugging Face model: the edits of model/core/capture/patching.py, with those of the
values read from a module's input or output (a block's `hook_resid_pre`, `hook_attn_out`, `hook_mlp_out`) made by
hooks registered for the pass, under the model's lock, acting for this thread alone (the gradients of attribution
patching are read through the same edits: model/hf/ablation.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import Edit, ModuleTap, editing
from attention_atlas.model.core.capture.patching import Edits, Patch, patch_edits
from attention_atlas.model.core.capture.record import model_lock
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.taps import first_input, first_output, output


@contextmanager
def patching_rows(model: nn.Module, taps: Mapping[str, object], rows: Sequence[Patch | None],
                  clean: Mapping[str, np.ndarray]) -> Iterator[None]:
    """While inside, this thread's batched passes of `model` patch row b with `rows[b]` (None: left as it is), each
    value taken from `clean` (hook name -> the clean run's value, batch removed)."""
    with editing_taps(model, patch_edits(taps, rows, clean)):
        yield


@contextmanager
def editing_taps(model: nn.Module, edits: Edits) -> Iterator[None]:
    """While inside, this thread's passes of `model` replace each hook's value by its edit (`edits_by_tap`)."""
    point_edits, reported_edits, module_edits = edits
    with ExitStack() as stack:
        if module_edits:
            stack.enter_context(model_lock(model))
            for tap, edit in module_edits:
                stack.callback(_module_hook(tap, edit).remove)
        stack.enter_context(editing(point_edits, reported_edits))
        yield


def _module_hook(tap: ModuleTap, edit: Edit) -> torch.utils.hooks.RemovableHandle:
    """A hook on the tap's module that edits what the tap reads, in this thread's passes: its first input (a
    pre-hook) or its output (the tensor, or the first of a tuple)."""
    owner = threading.get_ident()
    if tap.read is first_input:
        def before(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if threading.get_ident() != owner:
                return None
            if args:
                return (edit(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": edit(kwargs["hidden_states"])}

        return tap.module.register_forward_pre_hook(before, with_kwargs=True)
    if tap.read in (first_output, output):
        def after(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
            if threading.get_ident() != owner:
                return None
            return edit(out) if isinstance(out, torch.Tensor) else (edit(out[0]), *out[1:])

        return tap.module.register_forward_hook(after, with_kwargs=True)
    raise UserError("This value of this model is computed from its module's values, not read as one of them: it "
                    "cannot be patched here.")
