"""The per-head hooks of a block's attention, where the probe shows them: what its attention function reports, and
where the queries it read were rotated or normalised, the projections' outputs before that."""

from __future__ import annotations

import torch
from torch import nn

from attention_atlas.model.hf.discovery.mlp import is_projection
from attention_atlas.model.hf.discovery.values import same, scaled_copy
from attention_atlas.model.hf.heads import ProjectionHeads
from attention_atlas.model.hf.probe import Probe
from attention_atlas.model.hf.taps import FusedHeads, TapTable, attention_hooks


def attention_table(attention: tuple[str, nn.Module], probe: Probe, rotary: bool) -> TapTable:
    """The per-head hooks of the attention part (or of its part that reports), paths relative to the block. rotary:
    the model rotates queries and keys, which is all that tells where projections are fused."""
    name, module = attention
    reporting = next(m for m in module.modules() if m in probe.queries)
    path = name + "".join(f".{n}" for n, m in module.named_modules() if m is reporting and n)
    separate = all(isinstance(getattr(reporting, p, None), nn.Linear) for p in ("q_proj", "k_proj"))
    changed = _changed(reporting, probe) if separate else "same"
    rotated = rotary and (changed in ("other", "more") if separate else True)
    table = dict(attention_hooks("attn", path, rotary=rotated, projected=changed != "same"))
    if changed == "more":  # the projection makes more than the queries (Qwen3.5/Next: each head's query and gate)
        del table["attn.hook_q"]
    if rotated and not separate:  # one fused projection: the queries and keys before the rotation are read from it
        fused = _fused_heads(reporting, probe)
        table = {k: v for k, v in table.items() if k not in ("attn.hook_q", "attn.hook_k")}
        if fused is not None:
            table |= {"attn.hook_q": (path, fused[0]), "attn.hook_k": (path, fused[1])}
    return table


def _fused_heads(module: nn.Module, probe: Probe) -> tuple[FusedHeads, FusedHeads] | None:
    """The readers of the queries and keys from a fused projection, whichever layout it has (Phi-3: every query, then
    every key, then every value; GPT-NeoX: each head's query, key and value side by side; Falcon: per key/value head,
    its queries, key and value): the one whose parts equal
    at position 0, which the rotation leaves as it is, what attention read."""
    query, key = probe.queries[module], probe.keys.get(module)  # (heads or kv_heads, len, d_head)
    for name, child in module.named_children():
        call = probe.calls.get(child)
        if key is None or call is None or not is_projection(child) or call.output is None:
            continue
        for layout in ("blocks", "per head", "per group"):
            sizes = (len(query), len(key), query.shape[-1])  # heads, kv_heads, d_head
            readers = (FusedHeads(name, 0, layout, *sizes), FusedHeads(name, 1, layout, *sizes))  # queries, keys
            try:
                made: list[torch.Tensor] = [reader.split(call.output)[0, :, 0] for reader in readers]  # (heads, d_head)
            except (RuntimeError, IndexError):  # the layout does not fit the projection's width
                continue
            if same(made[0], query[:, 0]) and same(made[1], key[:, 0]):
                return readers
    return None


def _changed(module: nn.Module, probe: Probe) -> str:
    """How the queries attention read differ from what its `q_proj` made: "same", "scaled" (OPT scales them when
    projecting, and passes a scale of 1), "other" (rotated, or normalised), or "more" (more heads' worth: the
    projection makes the queries and something else, as a gate)."""
    reported = probe.queries[module]  # (heads, len, d_head)
    projected = ProjectionHeads("q_proj").tap(module).read((), {}, probe.calls[module.q_proj].output)[0]
    if projected.shape != reported.shape:
        return "more"
    return "same" if same(reported, projected) else "scaled" if scaled_copy(reported, projected) else "other"
