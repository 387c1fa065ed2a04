"""The attention of Hugging Face models: fast, with per-head hooks q, k, v, rot_q, rot_k, attn_scores, pattern, z.

Every supported family (BERT, GPT-2, Llama/Mistral/Qwen2, T5, BART, Marian) computes attention in a
function it looks up in transformers' attention interface by the name of its implementation, and hands
it query, key and value already split into heads (and rotated, in rotary models), the mask, its scaling
and any position bias (T5). Models are loaded with the implementation ATTENTION, registered once here:
softmax(Q K^T x scale + bias + M) V by torch's fused `scaled_dot_product_attention` (never materialising the
probabilities; given a plain causal mask as its own `is_causal`, which skips the hidden keys), which on the thread
of a capture also reports what it asks for (model/core/capture/hooks.py `reports_wanted`): the per-head inputs,
the scores (computed only then), the output z, and for `hook_pattern` what the pattern is computed from later, on
demand (model/core/attention/source.py), instead of the pattern itself.
A capture that summarises its run reduces each layer's probabilities as the layer reports them and computes the
layer's output from those same probabilities (PatternInputs.summary_rows): then the fused kernel is skipped, and
the probabilities are computed once, not once by the kernel and again for the summary (on the CPU the kernel was
44% of a 2,048-token forward pass). Otherwise GPT-2 configs with reorder_and_upcast_attn keep their own eager
float32 path. Asked for nothing, it costs two thread-local lookups per layer; the shared model itself is never
changed per run. A thread that ablates heads (model/core/capture/ablation.py) has each head's output `z` edited here,
before W_O.

Rotary models rotate q and k before that call, so their `hook_q`/`hook_k` (before the rotation) are read
from the projections' outputs with a forward hook instead (ProjectionHeads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention_atlas.model.core.attention.layer_inputs import PatternInputs
from attention_atlas.model.core.capture.hooks import (
    ModuleTap,
    Recorder,
    ReportedTap,
    active_recorder,
    reported_edit,
    reports_wanted,
)
from attention_atlas.model.core.masks import causal_mask
from attention_atlas.model.hf.chunks import chunk_size, chunked
from attention_atlas.model.hf.made_once import made_once

ATTENTION = "atlas"  # the attn_implementation models are loaded with


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
    attention_mask: torch.Tensor | None,  # additive, (batch or 1, 1, q_len, >= k_len)
    **kwargs: Any,  # scaling, dropout, position_bias (T5), sliding_window, softcap (Gemma 2), ...
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The family's attention, reporting what the capturing thread asks of `module`.
    Returns (output (batch, q_len, heads, d_head), None: the probabilities are never materialised here)."""
    wanted = reports_wanted(module)
    scale = _scale(query, kwargs.get("scaling"))
    bias = kwargs.get("position_bias")  # (batch or 1, heads, q_len, k_len)
    softcap = kwargs.get("softcap")
    sinks = kwargs.get("s_aux")  # (heads,): GPT-OSS's learned sink logit a head, one more key in every row's softmax
    window = kwargs.get("sliding_window") or 0
    mask = windowed(attention_mask, window, query.size(-2), key.size(-2), query.device)
    mask = chunked(mask, chunk_size(module), query.size(-2), key.size(-2), query.device)  # Llama 4's chunks
    if "window" in wanted:  # what the layer slides by (model/hf/discovery.py asks once, when a model loads)
        _recorder()(wanted["window"], torch.tensor(window))
    computed = _report_inputs(wanted, query, key, value, scale, bias, mask, softcap, sinks) if wanted else None
    if computed is not None:  # by the capture, from the probabilities it summarised (model/core/attention/source.py)
        out = computed
    elif getattr(module, "reorder_and_upcast_attn", False):  # GPT-2's own float32 path, as eager takes it
        out, _ = module._upcast_and_reordered_attn(query, key, value, mask)
    elif softcap is not None or sinks is not None:  # scores capped before the mask, or a sink: no fused kernel
        out = _capped(query, key, value, mask, scale, softcap, sinks)  # does that
    else:
        out = _fused(query, key, value, mask, scale, bias)
    edit = reported_edit(module, "z")
    if edit is not None:  # an intervention on this thread (model/core/capture/ablation.py)
        out = edit(out.transpose(1, 2)).transpose(1, 2)  # the edit sees (batch, heads, q_len, d_head)
    if "z" in wanted:
        _recorder()(wanted["z"], out.transpose(1, 2))  # (batch, heads, q_len, d_head)
    return out, None


def _scale(query: torch.Tensor, scaling: float | None) -> float:
    """The scores' factor: the model's own, or 1/sqrt(d_head) as eager attention defaults to."""
    return query.size(-1) ** -0.5 if scaling is None else float(scaling)


def windowed(mask: torch.Tensor | None, window: int | None, q_len: int, k_len: int,
             device: torch.device) -> torch.Tensor | None:
    """The additive mask with the keys `window` positions away from each query or more hidden too: a sliding-window
    layer's (Mistral, Gemma 2/3, ModernBERT ...), as transformers' own masks hide them (query i, the last q_len of the
    k_len positions, sees key j when |i - j| < window: with a causal mask, 0 <= i - j < window; ModernBERT's encoder
    passes its half-window + 1, and sees as far on either side). Made once per mask and window on a thread,
    since every such layer reads the same. The app's runs pass masks of their own, which transformers does not
    window itself; a mask transformers made is windowed already, and stays what it is. Kept while `mask` lives."""
    if not window or window >= k_len:
        return mask

    def hide_too_far() -> torch.Tensor:
        rows = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (q_len, 1): each query's position
        too_far = (rows - torch.arange(k_len, device=device)[None]).abs() >= window  # (q_len, k_len)
        dtype = torch.float32 if mask is None else mask.dtype
        base = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device) if mask is None else mask[..., :k_len]
        return base.masked_fill(too_far, torch.finfo(dtype).min)

    if mask is None:
        return hide_too_far()
    return made_once(mask, ("window", window, q_len, k_len), hide_too_far)  # every layer of this window reads it


def _capped(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float,
            softcap: float | None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(c tanh(Q K^T x scale / c) + M) V, as eager computes it with logit soft-capping (Gemma 2), or with a
    sink logit a head (GPT-OSS: one more key whose probability is dropped) -> (batch, q_len, heads, d_head)."""
    group = query.size(1) // key.size(1)
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores + mask[..., : key.size(-2)]
    if sinks is not None:  # (batch, heads, q_len, k_len + 1), the sink's column dropped after the softmax
        scores = torch.cat([scores, sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)], -1)
    probabilities = scores.softmax(-1, dtype=torch.float32)[..., : key.size(-2)].to(query.dtype)
    return torch.matmul(probabilities, value).transpose(1, 2)


def _fused(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float,
           bias: torch.Tensor | None) -> torch.Tensor:
    """softmax(Q K^T x scale + bias + M) V with torch's fused kernel -> (batch, q_len, heads, d_head)."""
    additive = None if mask is None else mask[..., : key.size(-2)]
    if bias is not None:
        additive = bias if additive is None else additive + bias
    causal = bias is None and mask is not None and made_once(mask, ("causal", key.size(-2)),
                                                             lambda: hides_ahead(additive))
    if causal:  # sdpa's own causal mask: it skips the hidden keys instead of adding the mask to them (half the work)
        additive = None
    grouped = query.size(1) != key.size(1)
    if grouped and additive is not None and query.is_cuda:  # CUDA's fused kernels take a mask or grouped heads,
        group = query.size(1) // key.size(1)  # not both (torch would fall back to its O(tokens²) math kernel):
        key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)  # repeat, as transformers
        grouped = False
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=additive, scale=scale, is_causal=causal,
                                         enable_gqa=grouped)
    return out.transpose(1, 2)


def hides_ahead(mask: torch.Tensor) -> bool:
    """Whether the additive `mask` (batch or 1, 1, q_len, k_len) is a causal mask and nothing else: as many queries as
    keys, each seeing itself and the keys before it (0 added) and hiding every key after it (the dtype's least number
    or -inf added), in every sequence of the batch. Then sdpa's `is_causal` gives the same numbers (as transformers'
    sdpa attention passes it where there is no padding)."""
    q_len, k_len = mask.shape[-2:]
    if q_len != k_len or q_len < 2:
        return False
    seen = causal_mask(q_len, mask.device)[0, 0]  # (q_len, k_len)
    hidden = mask.masked_fill(seen, float("-inf"))
    return bool((mask.masked_fill(~seen, 0) == 0).all()) and bool((hidden <= torch.finfo(mask.dtype).min).all())


def _recorder() -> Recorder:
    """This thread's recorder, wherever a module is asked for reports (`recording` sets both, so there is one)."""
    record = active_recorder()
    assert record is not None, "reports asked for outside recording"
    return record


def _report_inputs(
    wanted: Mapping[str, str], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
    position_bias: torch.Tensor | None, mask: torch.Tensor | None, softcap: float | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Hand the wanted values going into attention to the thread's recorder; the scores are computed only if
    wanted, and a pattern is handed over as what it is computed from (model/core/attention/source.py). Returns
    attention's output (batch, q_len, heads, d_head) where the recorder computed it with the pattern, else None."""
    record = _recorder()
    inputs = {"query": query, "key": key, "value": value}
    output = None
    for quantity, name in wanted.items():
        if quantity in inputs:
            record(name, inputs[quantity])
        elif quantity == "scores":
            record(name, _scores(query, key, scale, position_bias, softcap))
        elif quantity == "pattern":
            pattern = PatternInputs(query, key, value, scale, mask, position_bias, softcap, sinks)
            record(name, pattern)
            output = pattern.output
    return output


def _scores(query: torch.Tensor, key: torch.Tensor, scale: float, position_bias: torch.Tensor | None,
            softcap: float | None) -> torch.Tensor:
    """(batch, heads, q_len, k_len): Q K^T x scale (+ position bias; soft-capped: c tanh(./c)), before the mask, as
    eager computes them; query head h reads key head h // (heads / kv_heads)."""
    key = key.repeat_interleave(query.size(1) // key.size(1), dim=1)  # (batch, heads, k_len, d_head)
    scores = torch.matmul(query, key.transpose(2, 3)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    return scores if position_bias is None else scores + position_bias


def register_attention() -> None:
    """Make ATTENTION a valid attn_implementation (with eager's additive masks); idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, eager_mask)
