"""A model spread over several devices by accelerate's big-model inference, which transformers loads through
(`from_pretrained(device_map="auto", max_memory=…, offload_folder=…)`, accelerate's own meanings): its layers fill
the GPUs in order, then the CPU, then the disk, each device up to its memory budget. A layer placed on the CPU while
a GPU computes, or on the disk, is "offloaded": its weights stay there (the meta device stands in for them in the
module) and accelerate's hook on each of its modules brings them to the computing device for each forward pass and
lets them go after it.

What that means for a shared server: bringing weights in and letting them go changes the modules, so every forward
pass of an offloaded model, and every read of an offloaded module's weights (`weights_at_hand`), takes the model's
one lock: such a model serves one run at a time (`serialise`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.capture.record import lock_of, model_lock, share_lock
from attention_atlas.model.core.errors import UserError

DEVICE_KEY = re.compile(r"cpu|mps|(?:cuda:)?(\d{1,2})")
BUDGET = re.compile(r"\d+(?:\.\d+)?\s*(?:[KMGT]i?B)?", re.IGNORECASE)
_UNITS = {"": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


@dataclass(frozen=True)
class Placement:
    """How to spread a model: device_map="auto" under these budgets. Plain values: part of a cache key."""

    max_memory: tuple[tuple[str, int], ...] = ()  # (device, bytes): ("0", 20 GiB), ("cpu", 2 GiB); a device not
    # named: all its free memory (accelerate's default)
    offload_folder: str | None = None  # where weights that must be converted before they are offloaded to the disk
    # are written (a GGUF's, say); safetensors weights are read from their own files

    def load_kwargs(self) -> dict[str, Any]:
        """from_pretrained's arguments for this placement."""
        kwargs: dict[str, Any] = {"device_map": "auto"}
        if self.max_memory:
            kwargs["max_memory"] = {int(d) if d.isdigit() else d: size for d, size in self.max_memory}
        if self.offload_folder:
            kwargs["offload_folder"] = self.offload_folder
        return kwargs


def parse_budgets(texts: list[str] | str) -> tuple[tuple[str, int], ...]:
    """Memory budgets as typed, `DEVICE=SIZE` each ("cpu=2GiB", "0=20GiB", "cuda:1=500MB"; a list, or one text with
    the budgets separated by spaces or commas) -> (device, bytes) pairs. ValueError saying what is wrong."""
    items = texts.replace(",", " ").split() if isinstance(texts, str) else texts
    budgets: dict[str, int] = {}
    for item in items:
        device, _, size = item.partition("=")
        match = DEVICE_KEY.fullmatch(device.strip().lower())
        if match is None:
            raise UserError(f"{item[:40]!r}: a memory budget names a device (cpu, mps, or a GPU's number: 0, 1 …), "
                             "then = and a size, e.g. cpu=2GiB")
        if not BUDGET.fullmatch(size.strip()):
            raise UserError(f"{item[:40]!r}: the size must be a number of bytes or a number with a unit (KB, MB, "
                             "GB, KiB, MiB, GiB), e.g. 0=20GiB")
        budgets[match.group(1) or match.group(0)] = _bytes(size.strip())
    return tuple(budgets.items())


def _bytes(size: str) -> int:
    number = re.match(r"\d+(?:\.\d+)?", size).group(0)  # type: ignore[union-attr]  # BUDGET matched
    return int(float(number) * _UNITS[size[len(number):].strip().upper()])


def budgets_text(budgets: tuple[tuple[str, int], ...]) -> str:
    """(device, bytes) pairs as a person reads them: "cpu 2 GiB, GPU 0 19.5 GiB"."""
    return ", ".join(f"{'GPU ' + d if d.isdigit() else d} {_size_text(size)}" for d, size in budgets)


def _size_text(size: int) -> str:
    for power, unit in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if size >= 1024**power:
            return f"{size / 1024**power:.3g} {unit}"
    return f"{size} B"


def is_spread(model: nn.Module) -> bool:
    """Whether accelerate spread `model` over more than one device, or offloaded it to the disk (a model it put on
    one device whole runs as any other)."""
    devices = set(getattr(model, "hf_device_map", {}).values())
    return len(devices) > 1 or "disk" in devices


def input_device(model: nn.Module) -> torch.device:
    """Where a model's inputs go: its device, or for a spread model the device accelerate computes on first (the
    first GPU in its map, else the CPU), as accelerate's dispatch chooses it. (A spread model's `.device` is that of
    its first weight, the meta device where that weight is offloaded to the disk.)"""
    if not is_spread(model):
        return model.device  # pyright: ignore[reportReturnType] transformers' property; torch's __getattr__
    placed = [d for d in model.hf_device_map.values() if d not in ("cpu", "disk")]
    if not placed:
        return torch.device("cpu")
    return torch.device(f"cuda:{placed[0]}" if isinstance(placed[0], int) else placed[0])


def device_words(model: nn.Module) -> str:
    """A model's device as the model card says it: "cuda:0", or a spread model's devices in its order
    ("cuda:0 + cpu + disk")."""
    if not is_spread(model):
        return str(model.device)
    named = (f"cuda:{d}" if isinstance(d, int) else str(d) for d in model.hf_device_map.values())
    return " + ".join(dict.fromkeys(named))


def serialise(model: nn.Module) -> None:
    """Make every forward pass of a spread model (and of an encoder-decoder's encoder, which runs on its own) take
    the model's lock (`model_lock`, the one its captures take), and every module whose weights are offloaded answer
    to the same lock (`weights_at_hand`, `exclusive`). Done once, at load, before the model is shared."""
    from accelerate.utils import has_offloaded_params

    lock = model_lock(model)
    encoder = model.get_encoder() if hasattr(model, "get_encoder") else None
    for part in (model, encoder):
        if part is not None:
            part.forward = _locked(part.forward, lock)
    for module in model.modules():
        if has_offloaded_params(module):
            share_lock(module, lock)


def _locked(forward: Any, lock: threading.RLock) -> Any:
    @functools.wraps(forward)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return forward(*args, **kwargs)

    return locked


def exclusive(module: nn.Module) -> threading.RLock | contextlib.nullcontext:
    """What to hold while calling an offloaded module on its own (its model's lock: the call brings its weights in
    and lets them go); nothing for a module whose weights stay in place."""
    return _offload_lock(module) or contextlib.nullcontext()


@contextlib.contextmanager
def weights_at_hand(module: nn.Module) -> Iterator[None]:
    """While open, `module`'s own weights are real tensors on the device it computes on, also where accelerate
    offloaded them (under its model's lock). A module of a model on one device: nothing to do."""
    lock = _offload_lock(module)
    if lock is None:
        yield
        return
    from accelerate.utils import align_module_device

    with lock, align_module_device(module):
        yield


def _offload_lock(module: nn.Module) -> threading.RLock | None:
    """The lock of the spread model whose offloaded `module` this is (`serialise`), None for any other module."""
    from accelerate.utils import has_offloaded_params

    return lock_of(module) if has_offloaded_params(module) else None


def computing_device(module: nn.Module) -> torch.device:
    """The device a module computes on: where accelerate brings its offloaded weights, else its first weight's."""
    hook = getattr(module, "_hf_hook", None)
    if hook is not None and getattr(hook, "execution_device", None) is not None:
        return torch.device(hook.execution_device)
    parameter = next(iter(module.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def placement_words(device_map: dict[str, Any]) -> str:
    """Where each part of a spread model lives, in words, consecutive layers on one device joined:
    "cpu: model.embed_tokens, model.layers.0–1 · disk: model.layers.2–3, model.norm, lm_head"."""
    by_device: dict[str, list[str]] = {}
    for name, device in device_map.items():
        where = f"GPU {device}" if isinstance(device, int) else str(device)
        by_device.setdefault(where, []).append(name or "the whole model")
    return " · ".join(f"{where}: {', '.join(_joined(names))}" for where, names in by_device.items())


def _joined(names: list[str]) -> list[str]:
    """["a.layers.0", "a.layers.1", "a.layers.2", "b"] -> ["a.layers.0–2", "b"]."""
    runs: list[tuple[str, int, int] | str] = []
    for name in names:
        prefix, _, index = name.rpartition(".")
        last = runs[-1] if runs else None
        if index.isdigit() and isinstance(last, tuple) and last[0] == prefix and last[2] == int(index) - 1:
            runs[-1] = (prefix, last[1], int(index))
        elif index.isdigit():
            runs.append((prefix, int(index), int(index)))
        else:
            runs.append(name)
    return [run if isinstance(run, str) else f"{run[0]}.{run[1]}" + (f"–{run[2]}" if run[2] > run[1] else "")
            for run in runs]
