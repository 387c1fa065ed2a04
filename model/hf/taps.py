"""Where the hook names live in Hugging Face models: a `Family` maps each hook name onto a module and a reader (the
tables of model/hf/families/, or what model/hf/discovery.py finds).

Each family maps names of the hook vocabulary (model/core/trace/hook_names.py, the same as the from-scratch
model's) onto module paths under `model.base_model`, with a reader that picks the tensor from the
module's (args, kwargs, output). Residual hooks are the sums before any norm: in post-norm families
(BERT, BART, Marian) they are read from the input of the norm that follows the sum. The per-head
values of attention (q, k, v, rot_q, rot_k, attn_scores, z) are reported by the attention function of
model/hf/heads.py; the pattern is read from the attention module's output. Only what a family lists can be
captured from a Hugging Face model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.hf.heads import ProjectionHeads, Reported
from attention_atlas.model.hf.router_scores import router_scores

Reader = Callable[[tuple[Any, ...], dict[str, Any], Any], torch.Tensor]


def output(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """The module's output tensor."""
    return out


def first_output(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """The hidden states of a module that returns a tensor or a tuple starting with one; returned flattened, (batch x
    len, d) for an input (batch, len, d) (Llama 4's mixture of experts), they are read as (batch, len, d)."""
    hidden = out if isinstance(out, torch.Tensor) else out[0]
    given = args[0] if args else kwargs.get("hidden_states")
    if hidden.dim() == 2 and isinstance(given, torch.Tensor) and given.dim() == 3 and \
            hidden.size(0) == given.size(0) * given.size(1):
        return hidden.view(given.size(0), given.size(1), -1)
    return hidden


def first_input(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """The hidden states going in (positional, or the keyword `hidden_states`)."""
    return args[0] if args else kwargs["hidden_states"]


def batched_output(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """A position table returned without a batch dimension gets one: (len, d) -> (1, len, d)."""
    return out.unsqueeze(0) if out.dim() == 2 else out


@dataclass(frozen=True)
class NormValue:
    """A norm module's values as TransformerLens's norms record them, computed from its input: what it divides by,
    (batch, len, 1), the standard deviation (LayerNorm) or the root mean square (RMSNorm) with the module's own
    epsilon; or, `normalized`, its input (centred, for LayerNorm) divided by that, (batch, len, d_model), before the
    norm's weight and bias (TransformerLens `components/layer_norm.py`: hook_normalized(x / scale), then w and b)."""

    rms: bool
    normalized: bool = False

    def tap(self, module: nn.Module) -> ModuleTap:
        eps = norm_eps(module)
        identity = isinstance(module, nn.Identity)  # in a norm's place (ModernBERT's first layer): divides by 1

        def read(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
            x = first_input(args, kwargs, out).float()
            if identity:
                return x if self.normalized else torch.ones_like(x[..., :1])
            centred = x if self.rms else x - x.mean(-1, keepdim=True)
            scale = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
            return centred / scale if self.normalized else scale

        return ModuleTap(module, read)


LAYER_NORM, RMS_NORM = NormValue(rms=False), NormValue(rms=True)


def norm_eps(module: nn.Module) -> float:
    """The epsilon a norm module adds under its square root (`eps`, or RMSNorm's `variance_epsilon`; a norm without
    either, as OLMo's: torch's LayerNorm default 1e-5)."""
    return float(getattr(module, "eps", None) or getattr(module, "variance_epsilon", None) or 1e-5)


@dataclass(frozen=True)
class OneRun:
    """A value the model computes with its positions flattened, (batch x len, ...) (OPT's MLP side), read as one
    run of them: (1, len, ...) (a capture reads one text)."""

    read: Reader | NormValue

    def tap(self, module: nn.Module) -> ModuleTap:
        inner = _tap(module, self.read)

        def read(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
            return inner.read(args, kwargs, out).unsqueeze(0)

        return ModuleTap(module, read)


@dataclass(frozen=True)
class UpHalf:
    """The second half of a fused gate-and-up projection's output, (batch, len, 2 d_ff) -> (batch, len, d_ff): the up
    projection (Phi-3's gate_up_proj holds [gate, up])."""

    def tap(self, module: nn.Module) -> ModuleTap:
        return ModuleTap(module, lambda args, kwargs, out: out.chunk(2, dim=-1)[1])


@dataclass(frozen=True)
class FusedHeads:
    """The queries (part 0) or keys (part 1) of a fused query/key/value projection, the child `projection` of the
    attention module, split into heads: (batch, len, width) -> (batch, heads, len, d_head). Layout "blocks": every
    query head, then every key head, then every value head (Phi-3); "per head": each head's query, key and value side
    by side (GPT-NeoX); "per group": each key/value head's group of query heads, then its key and its value (Falcon's
    new decoder architecture)."""

    projection: str
    part: int
    layout: str
    heads: int
    kv_heads: int
    d_head: int

    def split(self, out: torch.Tensor) -> torch.Tensor:
        if self.layout == "per group":  # (batch, len, kv_heads, group + 2, d_head)
            grouped = out.unflatten(-1, (self.kv_heads, -1, self.d_head))
            return (grouped[..., :-2, :].flatten(-3, -2) if self.part == 0 else grouped[..., -2, :]).transpose(1, 2)
        if self.layout == "per head":
            return out.unflatten(-1, (self.heads, 3, self.d_head))[..., self.part, :].transpose(1, 2)
        start = 0 if self.part == 0 else self.heads * self.d_head
        count = self.heads if self.part == 0 else self.kv_heads
        return out[..., start : start + count * self.d_head].unflatten(-1, (count, self.d_head)).transpose(1, 2)

    def tap(self, module: nn.Module) -> ModuleTap:
        return ModuleTap(module.get_submodule(self.projection), lambda args, kwargs, out: self.split(out))


def router_weights(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """A mixture's router's scores over every expert, (tokens, experts) float32, from what it returns (logits, weights,
    indices), by its own scoring function: a softmax, a sigmoid (DeepSeek-V3) … (model/hf/router_scores.py)."""
    return router_scores(out)


def router_indices(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
    """The experts a mixture's router chose for each token, (tokens, k), as it returns them (logits, weights,
    indices): its own choice, whatever it adds to the logits before choosing."""
    return out[-1]


@dataclass(frozen=True)
class Copied:
    """A value read as a copy: the model changes it in place after the module returns it (Falcon adds attention's
    output into the MLP's), and a capture on the CPU keeps what it reads without copying."""

    read: Reader | NormValue | UpHalf | FusedHeads

    def tap(self, module: nn.Module) -> ModuleTap:
        inner = _tap(module, self.read)
        return ModuleTap(module, lambda args, kwargs, out: inner.read(args, kwargs, out).clone())


TapMaker = NormValue | Reported | ProjectionHeads | OneRun | UpHalf | FusedHeads | Copied  # makes the tap
TapTable = dict[str, tuple[str, Reader | TapMaker]]  # hook name -> (module path, reader); "{i}": the layer


def norm_hooks(prefix: str, path: str, norm: NormValue) -> TapTable:
    """`<prefix>.hook_scale` and `<prefix>.hook_normalized` of the norm module at `path`."""
    return {f"{prefix}.hook_scale": (path, norm), f"{prefix}.hook_normalized": (path, replace(norm, normalized=True))}


def attention_hooks(prefix: str, path: str, rotary: bool = False, projected: bool = False) -> TapTable:
    """`<prefix>.hook_q` ... `<prefix>.hook_z` of the attention module at `path`. Rotary: `hook_q`/`hook_k`
    before the rotation (the projections' outputs), `hook_rot_q`/`hook_rot_k` after it (what attention reads).
    projected: `hook_q`/`hook_k` are the projections' outputs though attention reads them changed (OPT's scaled
    queries)."""
    hooks: dict[str, Reader | TapMaker]
    if rotary or projected:
        hooks = {"hook_q": ProjectionHeads("q_proj"), "hook_k": ProjectionHeads("k_proj"), "hook_v": Reported("value")}
    else:
        hooks = {"hook_q": Reported("query"), "hook_k": Reported("key"), "hook_v": Reported("value")}
    if rotary:
        hooks |= {"hook_rot_q": Reported("query"), "hook_rot_k": Reported("key")}
    hooks |= {"hook_attn_scores": Reported("scores"), "hook_pattern": Reported("pattern"), "hook_z": Reported("z")}
    return {f"{prefix}.{name}": (path, read) for name, read in hooks.items()}


@dataclass(frozen=True)
class Family:
    """One architecture family: its kind, positions, norm placement and hook tables."""

    name: str
    kind: str  # "encoder", "decoder" or "encoder-decoder"
    positional: str
    norm: str
    stack_taps: dict[str, TapTable]  # stack ("encoder"/"decoder") -> taps once per stack
    layer_taps: dict[str, TapTable]  # stack -> taps once per layer ("{i}" in paths and names)
    layer_counts: dict[str, Callable[[Any], int]]  # stack -> config -> number of layers
    position_bias: bool = False  # attention adds a (heads, q_len, k_len) bias to the scores (T5's relative positions)
    bias_per_layer: bool = False  # that bias is each layer's own (DeBERTa's position terms), not one a site shares
    final_norm: str | None = None  # path of the last stack's final norm (what the logit lens reads through)
    unplaced: tuple[str, ...] = ()  # hooks a model of this layout has that could not be placed (model/hf/discovery.py)
    windows: tuple[int, ...] = ()  # per layer: the sliding window its attention reads (0: none); () if none slides
    blocks: tuple[int, ...] = ()  # per decoder layer: the number of its block, where only some blocks have softmax
    # attention (hybrids: model/hf/discovery); (): layer i is block i
    block_list: str = ""  # a decoder whose layer map is not empty (a block that is not softmax attention alone: a
    # hybrid's, Falcon-H1's attention beside Mamba) or whose layers offer no hook_resid_post (a dense Granite's scaled
    # sums): the path of its block list, whose every block, attention or not,
    n_blocks: int = 0  # offers `decoder.blocks.{b}.hook_resid_pre` and `hook_resid_post` (the stream at each block)

    def taps(self, model: nn.Module) -> dict[str, ModuleTap | ReportedTap]:
        """Every hook name of this model, mapped to its module and reader."""
        modules = dict(model.base_model.named_modules())
        taps: dict[str, ModuleTap | ReportedTap] = {}
        for stack, count in self.layer_counts.items():
            for i in range(count(model.config)):
                for name, (path, read) in self.layer_taps[stack].items():
                    block = self.blocks[i] if self.blocks else i
                    taps[f"{stack}.{i}.{name}"] = _tap(modules[path.format(i=block)], read)
            for name, (path, read) in self.stack_taps.get(stack, {}).items():
                taps[f"{stack}.{name}"] = _tap(modules[path], read)
        for b in range(self.n_blocks):
            block = modules[f"{self.block_list}.{b}"]
            taps |= {f"decoder.blocks.{b}.hook_resid_pre": ModuleTap(block, first_input),
                     f"decoder.blocks.{b}.hook_resid_post": ModuleTap(block, first_output)}
        return taps


def _tap(module: nn.Module, read: Reader | TapMaker) -> ModuleTap | ReportedTap:
    return read.tap(module) if isinstance(read, TapMaker) else ModuleTap(module, read)
