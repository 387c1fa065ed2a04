"""A twin of a model NDIF hosts, made here from its config: the same class, the same layers and module paths, a few
dozen dimensions wide, random weights (a 405B model's twin is a few MB). What this app knows of a layout it learns
from a pass through the model (model/hf/discovery: which module holds each hook), and NDIF's model cannot be probed
so; its twin can, and answers for it:

- its hooks (`Family`), found by the same discovery and held to transformers' eager attention (model/hf/proof.py) as a
  local model is;
- the order in which one forward pass reaches each module's input and output and each attention function's call
  (`Probe.order`): an nnsight request must ask for them in that order;
- for each hook read off a module, which of the module's input and output its reader needs (`Probe.parts`): the one
  that gives the reader's own value when the other is a stand-in without values. Only that part crosses the wire.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap, recording
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families import adapter_of, family_of
from attention_atlas.model.hf.heads import ATTENTION, register_attention
from attention_atlas.model.hf.proof import prove_attention
from attention_atlas.model.hf.runner import HFRunner

WIDTH, HEADS, D_HEAD, D_FF = 32, 4, 8, 64  # the twin's sizes
PROBE_IDS = [1, 2, 3, 4, 5, 6, 7, 8]  # what the twin reads to show its order (random weights: any ids do)
Event = tuple[str, str]  # (module path, "input" | "output" | "attention")
Parts = tuple[str, ...]  # what a reader needs of its module: ("output",), ("input",) or ("input", "output")
WAYS: tuple[Parts, ...] = (("output",), ("input",), ("input", "output"))


def twin_config(config: Any) -> Any:
    """`config` made narrow: WIDTH wide, HEADS heads of D_HEAD (grouped-query where the model's are: 2 key/value
    heads), an MLP D_FF wide; its layers, vocabulary, positions and everything else as they are."""
    twin = copy.deepcopy(config)
    heads = config.num_attention_heads
    grouped = (getattr(config, "num_key_value_heads", None) or heads) < heads
    twin.hidden_size, twin.num_attention_heads = WIDTH, HEADS
    if getattr(twin, "num_key_value_heads", None) is not None:
        twin.num_key_value_heads = 2 if grouped else HEADS
    if getattr(twin, "head_dim", None) is not None:
        twin.head_dim = D_HEAD
    for name in ("intermediate_size", "n_inner"):
        if getattr(twin, name, None):
            setattr(twin, name, D_FF)
    if getattr(twin, "rotary_dim", None):  # GPT-J: the rotated part of each head, kept in proportion
        twin.rotary_dim = max(2, D_HEAD * config.rotary_dim // (config.hidden_size // heads) // 2 * 2)
    return twin


def build_twin(model_id: str, config: Any, tokenizer: Any) -> HFRunner:
    """The twin of `config`'s model as a local runner whose attention this app has proven; UserError where the
    model's attention is computed in its own code (NDIF's copy then has no attention function to read)."""
    import transformers

    adapter = adapter_of(config.model_type)
    if adapter.own_attention:
        raise UserError(f"{config.model_type} computes attention in its own code, which NDIF's copy of the model "
                        "runs as it is: this app cannot read its attention there.")
    register_attention()
    twin = twin_config(config)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(twin, attn_implementation=ATTENTION,
                                                              dtype=torch.float32)
    adapter.prepare(model)
    model.requires_grad_(False)
    runner = HFRunner(model_id, model.eval(), tokenizer, family_of(model, twin, "decoder"), {})
    prove_attention(runner)
    return runner


@dataclass(frozen=True)
class Probe:
    """What one pass of the twin showed."""

    order: dict[Event, int]  # each event's place in the pass
    parts: dict[str, Parts]  # hook name read off a module -> what its reader needs of it (absent: it cannot be read)


def probe(runner: HFRunner) -> Probe:
    """One pass of the twin recording each tapped module's input and output and each attention call, in order."""
    model = runner.model
    paths = {module: path for path, module in model.named_modules()}
    modules = {tap.module for tap in runner.taps.values() if isinstance(tap, ModuleTap)}
    attentions = {tap.module for tap in runner.taps.values() if isinstance(tap, ReportedTap)}
    order: dict[Event, int] = {}
    seen: dict[nn.Module, tuple[tuple[Any, ...], dict[str, Any], Any]] = {}

    def note(event: Event) -> None:
        order.setdefault(event, len(order))

    def before(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        note((paths[module], "input"))

    def after(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        note((paths[module], "output"))
        seen.setdefault(module, (args, kwargs, out))

    reports = {module: {"query": paths[module]} for module in attentions}
    with _hooked(modules, before, after), recording(lambda path, value: note((path, "attention")), reports), \
            torch.inference_mode():
        model(torch.tensor([PROBE_IDS]) % model.config.vocab_size)
    parts = {}
    for name, tap in runner.taps.items():
        if isinstance(tap, ModuleTap) and tap.module in seen:
            way = _way(tap, *seen[tap.module])
            if way is not None:
                parts[name] = way
    return Probe(order, parts)


@contextmanager
def _hooked(modules: set[nn.Module], before: Callable[..., None], after: Callable[..., None]) -> Iterator[None]:
    handles = [h for m in modules for h in (m.register_forward_pre_hook(before, with_kwargs=True),
                                            m.register_forward_hook(after, with_kwargs=True))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _way(tap: ModuleTap, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Parts | None:
    """The first of WAYS whose parts alone (the other a stand-in: `stand_in`) give the reader's own value."""
    given = args[0] if args else kwargs.get("hidden_states")
    expected = tap.read(args, kwargs, out)
    for way in WAYS:
        x = given if "input" in way else stand_in(out)
        try:
            value = tap.read((x,), {}, out if "output" in way else None)
        except (TypeError, IndexError, KeyError, AttributeError, RuntimeError):
            continue
        if value.shape == expected.shape and torch.equal(value, expected):
            return way
    return None


def stand_in(out: Any) -> torch.Tensor:
    """What a reader is given for a module's input it does not need: zeros, shaped as the module's (first) output,
    held in one number."""
    first = out if isinstance(out, torch.Tensor) else next(v for v in out if isinstance(v, torch.Tensor))
    return torch.zeros((), dtype=first.dtype).expand(first.shape)
