"""One run of a model on a few tokens, recording what its blocks and their parts read and returned, and what each
attention module's attention function received (model/hf/discovery.py reads the model's layout from it)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import recording
from attention_atlas.model.hf.placement import input_device

PROBE_TOKENS = 6


@dataclass
class Call:
    """One call of a module during the probe: its place in the order of calls, and its first input and output."""

    order: int
    input: torch.Tensor | None
    output: torch.Tensor | None  # as returned (a copy)
    changed_later: bool = False  # the model changed the output in place after it was returned (Falcon's MLP's)
    returned_indices: bool = False  # it returned a tuple ending in integers (a mixture's router: the experts chosen)


@dataclass
class Probe:
    """What the probe pass saw: each module's first call, and what each attention module's attention function
    received."""

    calls: dict[nn.Module, Call] = field(default_factory=dict)
    queries: dict[nn.Module, torch.Tensor] = field(default_factory=dict)  # attention module -> (heads, len, d_head)
    keys: dict[nn.Module, torch.Tensor] = field(default_factory=dict)  # attention module -> (kv_heads, len, d_head)
    windows: dict[nn.Module, int] = field(default_factory=dict)  # attention module -> its sliding window (0: none)


@contextmanager
def _watching(modules: list[nn.Module], probe: Probe) -> Iterator[None]:
    """Record each module's first call into `probe` while inside; on leaving, whether each output was changed since."""
    counter = itertools.count()
    returned: dict[nn.Module, torch.Tensor] = {}

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if module not in probe.calls:
            inputs = args[0] if args else kwargs.get("hidden_states", kwargs.get("input"))
            result = out if isinstance(out, torch.Tensor) else out[0] if isinstance(out, tuple) and out else None
            indices = isinstance(out, tuple) and bool(out) and isinstance(out[-1], torch.Tensor) \
                and not out[-1].is_floating_point()
            probe.calls[module] = Call(next(counter), _tensor(inputs), _tensor(result), returned_indices=indices)
            if isinstance(result, torch.Tensor):
                returned[module] = result

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in modules]
    try:
        yield
        for module, result in returned.items():
            call = probe.calls[module]
            call.changed_later = not torch.equal(call.output, result.float())
    finally:
        for handle in handles:
            handle.remove()


def _tensor(value: Any) -> torch.Tensor | None:
    """A float32 copy (the model may change the tensor in place later: Falcon adds attention's output to the MLP's)."""
    return value.detach().to(torch.float32, copy=True) if isinstance(value, torch.Tensor) else None


def probe_run(model: nn.Module, base: nn.Module, layers: nn.ModuleList, kind: str) -> Probe:
    """Run the model once on PROBE_TOKENS tokens, recording the calls of every module (the blocks, their parts at any
    depth, and every module outside the blocks), and the queries, keys and sliding window each attention module's
    attention function received."""
    inside = {m for block in layers for m in block.modules()}
    watched = [m for m in base.modules() if m not in inside]
    for block in layers:
        watched += block.modules()  # the block, its parts, and theirs at any depth (GPT-Neo's attention is nested)
    probe = Probe()
    reports = {m: {quantity: f"{quantity} {id(m)}" for quantity in ("query", "key", "window")} for m in inside}
    by_id = {str(id(m)): m for m in inside}

    def record(name: str, value: torch.Tensor) -> None:
        quantity, module = name.split()
        if quantity == "window":
            probe.windows.setdefault(by_id[module], int(value))
        else:
            seen = probe.queries if quantity == "query" else probe.keys
            seen.setdefault(by_id[module], value[0].detach().float())

    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.arange(1, PROBE_TOKENS + 1, device=input_device(model))[None] % vocab  # (1, len)
    with _watching(watched, probe), recording(record, reports), torch.inference_mode():
        model(input_ids=ids, **({"use_cache": False} if kind == "decoder" else {}))
    return probe
