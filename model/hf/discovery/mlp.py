"""A block's MLP as the probe saw it called, and the hooks inside it (mlp.hook_pre, hook_pre_linear, hook_post)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attention_atlas.model.hf.discovery.values import same
from attention_atlas.model.hf.probe import Probe
from attention_atlas.model.hf.taps import (
    OneRun,
    Reader,
    TapTable,
    UpHalf,
    first_input,
    first_output,
    output,
    router_indices,
    router_weights,
)


@dataclass
class MLP:
    """A block's MLP: a part of its own (`path`), or its projections among the block's parts (OPT; `path` "")."""

    path: str
    order: int  # when it was called (its first projection, where it has no module of its own)
    parts: list[tuple[str, nn.Module]]  # what it calls, in the order called
    input: torch.Tensor | None
    output: torch.Tensor | None
    reads: tuple[str, Reader]  # where its input is read
    made: tuple[str, Reader]  # where its output is read


def is_projection(module: nn.Module) -> bool:
    """A linear map (nn.Linear, GPT-2's Conv1D): a 2D weight."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and not isinstance(module, nn.Embedding)


def find_mlp(block: nn.Module, others: list[tuple[str, nn.Module]], probe: Probe) -> MLP | None:
    """The block's MLP: its one part with weights besides attention and the norms (`others`), or else its
    projections."""
    if len(others) == 1:
        name, module = others[0]
        call = probe.calls[module]
        parts = sorted(((n, m) for n, m in module.named_children() if m in probe.calls),
                       key=lambda item: probe.calls[item[1]].order)
        return MLP(name, call.order, parts, call.input, call.output, (name, first_input), (name, first_output))
    if len(others) >= 2 and all(is_projection(m) for _, m in others):
        parts = sorted(((n, m) for n, m in block.named_children() if m in probe.calls
                        and (is_projection(m) or not any(True for _ in m.parameters()))),
                       key=lambda item: probe.calls[item[1]].order)
        first, last = probe.calls[others[0][1]], probe.calls[others[-1][1]]
        return MLP("", first.order, parts, first.input, last.output, (others[0][0], first_input),
                   (others[-1][0], output))
    return None


def mlp_table(mlp: MLP, probe: Probe) -> TapTable:
    """mlp.hook_pre, hook_pre_linear and hook_post, where the MLP's parts show them (paths relative to the block)."""
    prefix = f"{mlp.path}." if mlp.path else ""
    linears = [(n, m) for n, m in mlp.parts if is_projection(m)]
    activations = [(n, m) for n, m in mlp.parts if not any(True for _ in m.parameters())
                   and not isinstance(m, nn.Dropout)]
    router = _router_table(mlp, prefix, probe)
    if router or len(linears) < 2:  # a mixture of experts (a router is a projection too), or a layout not seen before
        return router
    table: TapTable = {}
    table["mlp.hook_post"] = (f"{prefix}{linears[-1][0]}", first_input)
    if len(activations) == 1:
        act_name, act = activations[0]
        table["mlp.hook_pre"] = (f"{prefix}{act_name}", first_input)
        if len(linears) == 3:
            up = [n for n, m in linears[:2] if not same(probe.calls[m].output, probe.calls[act].input)]
            if len(up) == 1:
                table["mlp.hook_pre_linear"] = (f"{prefix}{up[0]}", output)
        fused = probe.calls[linears[0][1]].output  # a fused gate and up projection: the gate is its first half
        if len(linears) == 2 and fused is not None and same(fused.chunk(2, -1)[0], probe.calls[act].input):
            table["mlp.hook_pre_linear"] = (f"{prefix}{linears[0][0]}", UpHalf())
    elif len(linears) == 2:
        table["mlp.hook_pre"] = (f"{prefix}{linears[0][0]}", output)
    return table


def _router_table(mlp: MLP, prefix: str, probe: Probe) -> TapTable:
    """A mixture of experts' mlp.hook_expert_weights and hook_expert_indices, read from its router: the part called
    first whose output has a score per expert (the experts: weights stacked per expert, as transformers keeps them)
    and that returns the experts it chose after its scores (logits, weights, indices)."""
    experts = {p.shape[0] for _, m in mlp.parts for p in m.parameters(recurse=False) if p.dim() == 3}
    for name, module in mlp.parts:
        call = probe.calls[module]
        if call.output is not None and call.output.dim() == 2 and call.output.shape[-1] in experts \
                and call.returned_indices:
            return {"mlp.hook_expert_weights": (f"{prefix}{name}", OneRun(router_weights)),
                    "mlp.hook_expert_indices": (f"{prefix}{name}", OneRun(router_indices))}
    return {}
