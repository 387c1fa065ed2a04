"""Per-head attention hooks of Hugging Face models: q, k, v, rot_q, rot_k, attn_scores and z.

Every supported family (BERT, GPT-2, Llama/Mistral/Qwen2, T5, BART, Marian) computes attention in a
function it looks up in transformers' attention interface by the name of its implementation, and hands
it query, key and value already split into heads (and rotated, in rotary models), the mask, its scaling
and any position bias (T5). Models are loaded with the implementation ATTENTION, registered once here:
the family's own eager function (so patterns are exactly eager's) that, on the thread of a capture
asking for them, also reports the per-head values (model/core/hooks.py `reports_wanted`). Asked for nothing,
it costs two thread-local lookups per layer; the shared model itself is never changed per run. A thread that
ablates heads (model/core/ablation.py) has each head's output `z` edited here, before W_O.

Rotary models rotate q and k before that call, so their `hook_q`/`hook_k` (before the rotation) are read
from the projections' outputs with a forward hook instead (ProjectionHeads).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from model.core.capture import ModuleTap, ReportedTap
from model.core.hooks import active_recorder, reported_edit, reports_wanted

ATTENTION = "atlas_eager"  # the attn_implementation models are loaded with
EagerAttention = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Reported:
    """A value the attention function reports for the attention module at the table's path."""

    quantity: str  # "query", "key", "value", "scores" or "z"

    def tap(self, module: nn.Module) -> ReportedTap:
        return ReportedTap(module, self.quantity)


@dataclass(frozen=True)
class ProjectionHeads:
    """The output of the attention module's child `projection` split into heads:
    (batch, len, heads * d_head) -> (batch, heads, len, d_head), d_head being the module's `head_dim`."""

    projection: str  # "q_proj" or "k_proj"

    def tap(self, module: nn.Module) -> ModuleTap:
        d_head = module.head_dim

        def read(args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> torch.Tensor:
            return out.unflatten(-1, (-1, d_head)).transpose(1, 2)

        return ModuleTap(module.get_submodule(self.projection), read)


def attention(
    module: nn.Module,
    query: torch.Tensor,  # (batch, heads, q_len, d_head), rotated in rotary models
    key: torch.Tensor,  # (batch, kv_heads, k_len, d_head)
    value: torch.Tensor,  # (batch, kv_heads, k_len, d_head)
    attention_mask: torch.Tensor | None,  # additive, (batch, 1, q_len, k_len)
    **kwargs: Any,  # scaling, dropout, position_bias (T5), ...
) -> tuple[torch.Tensor, torch.Tensor]:
    """The family's eager attention, reporting what the capturing thread asks of `module`.
    Returns (output (batch, q_len, heads, d_head), probabilities (batch, heads, q_len, k_len))."""
    wanted = reports_wanted(module)
    if wanted:
        _report_inputs(wanted, query, key, value, kwargs.get("scaling"), kwargs.get("position_bias"))
    out, weights = _eager(type(module))(module, query, key, value, attention_mask, **kwargs)
    edit = reported_edit(module, "z")
    if edit is not None:  # an intervention on this thread (model/core/ablation.py)
        out = edit(out.transpose(1, 2)).transpose(1, 2)  # the edit sees (batch, heads, q_len, d_head)
    if "z" in wanted:
        active_recorder()(wanted["z"], out.transpose(1, 2))  # (batch, heads, q_len, d_head)
    return out, weights


def _report_inputs(
    wanted: Mapping[str, str], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    scaling: float | None, position_bias: torch.Tensor | None,
) -> None:
    """Hand the wanted values going into attention to the thread's recorder; the scores are computed only if wanted."""
    record = active_recorder()
    inputs = {"query": query, "key": key, "value": value}
    for quantity, name in wanted.items():
        if quantity in inputs:
            record(name, inputs[quantity])
        elif quantity == "scores":
            record(name, _scores(query, key, scaling, position_bias))


def _scores(
    query: torch.Tensor, key: torch.Tensor, scaling: float | None, position_bias: torch.Tensor | None
) -> torch.Tensor:
    """(batch, heads, q_len, k_len): Q K^T x scaling (+ position bias), before the mask, as eager computes them;
    query head h reads key head h // (heads / kv_heads)."""
    key = key.repeat_interleave(query.size(1) // key.size(1), dim=1)  # (batch, heads, k_len, d_head)
    scores = torch.matmul(query, key.transpose(2, 3)) * (query.size(-1) ** -0.5 if scaling is None else scaling)
    return scores if position_bias is None else scores + position_bias


@functools.cache
def _eager(attention_class: type) -> EagerAttention:
    """What eager attention runs for `attention_class`: the eager function of the modeling file that defines it,
    or for GPT-2 configs with reorder_and_upcast_attn, GPT-2's own float32 path (as eager takes it)."""
    eager = importlib.import_module(attention_class.__module__).eager_attention_forward
    if not hasattr(attention_class, "_upcast_and_reordered_attn"):
        return eager

    def gpt2_eager(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if module.reorder_and_upcast_attn:
            return module._upcast_and_reordered_attn(query, key, value, attention_mask)
        return eager(module, query, key, value, attention_mask, **kwargs)

    return gpt2_eager


def register_attention() -> None:
    """Make ATTENTION a valid attn_implementation (and give it eager's masks); idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, eager_mask)
