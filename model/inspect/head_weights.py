"""One attention head's own weights, read from the loaded model of any supported family, as numpy.

Every family stores W_Q, W_K, W_V and W_O differently: the from-scratch model as one fused `in_proj`
(rows [W_Q; W_K; W_V]) and `out_proj`; BERT as `query`/`key`/`value` Linears (W_O in the layer's
`attention.output.dense`); GPT-2 as one Conv1D `c_attn` whose weight is (d_model, 3 d_model), already
transposed, and `c_proj`; Llama as `q_proj`/`k_proj`/`v_proj`/`o_proj` with fewer key/value heads
(GQA); T5 as `q`/`k`/`v`/`o` without biases and without the 1/sqrt(d_head) scaling; BART and Marian as
`q_proj`/`k_proj`/`v_proj`/`out_proj`; DistilBERT as `q_lin` ... `out_lin`; GPT-NeoX as one `query_key_value` with each
head's q, k and v side by side; Phi-3 as one `qkv_proj`; Phi's W_O is `dense`. `head_weights` returns them all in one
layout: x @ W + b, with what the model does around QK^T: its scale, rotation, query/key norms, soft-capping.

Nothing here changes the model: weights are copied out under `torch.no_grad`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.placement import computing_device, exclusive, weights_at_hand
from attention_atlas.model.hf.taps import norm_eps
from attention_atlas.model.inspect.norm_output import norm_affine
from attention_atlas.model.inspect.rotary import rotary_tables

Affine = tuple[np.ndarray, np.ndarray | None]  # (W (d_in, d_out), b (d_out,) or None): x @ W + b


@dataclass(frozen=True)
class Rotary:
    """A rotary embedding at positions 0..len-1: (cos, sin), each (len, r), rotating the first r dimensions of a
    head (all of them, or a part: Phi, GPT-NeoX, GPT-J) in pairs (i, i + r/2) (Llama and most) or (2i, 2i + 1)."""

    cos: np.ndarray
    sin: np.ndarray
    interleaved: bool = False


@dataclass(frozen=True)
class QueryKeyNorm:
    """An RMSNorm of the queries (or keys) after their projection (Qwen3, Gemma 3, OLMo 2): x / RMS(x) x gain, the
    RMS over the head's own d_head numbers, or over every head's at once (`whole`: OLMo 2), which then needs the
    layer's whole projection."""

    gain: np.ndarray  # (d_head,) this head's
    eps: float
    whole: Affine | None = None  # (W (d_model, heads x d_head), b): every head's projection, when the RMS spans them


@dataclass(frozen=True)
class HeadWeights:
    """One head's slices of the projections, and what the model does around QK^T."""

    head: int
    kv_head: int  # the key/value head this query head reads (= head unless GQA)
    n_heads: int
    n_kv_heads: int
    d_head: int
    w_q: np.ndarray  # (d_model, d_head)
    b_q: np.ndarray | None  # (d_head,)
    w_k: np.ndarray  # (d_model, d_head)
    b_k: np.ndarray | None
    w_v: np.ndarray  # (d_model, d_head)
    b_v: np.ndarray | None
    w_o: np.ndarray  # (heads * d_head, d_model): every head's rows (the concatenation of heads goes in)
    b_o: np.ndarray | None  # (d_model,)
    scale: float  # what Q K^T is multiplied by
    scale_text: str  # how a person reads it: "1/√8", "1 (T5 does not scale)"
    rotary: Rotary | None = None  # rotary models only
    position_bias: np.ndarray | None = None  # (q_len, k_len) added to the scores (T5's relative buckets), else None
    q_norm: QueryKeyNorm | None = None
    k_norm: QueryKeyNorm | None = None
    softcap: float | None = None  # scores capped to c tanh(score / c) before the mask (Gemma 2)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (a cache counts them)."""
        norms = [a for n in (self.q_norm, self.k_norm) if n is not None for a in (n.gain, *(n.whole or ()))]
        arrays = [self.w_q, self.b_q, self.w_k, self.b_k, self.w_v, self.b_v, self.w_o, self.b_o,
                  self.position_bias, *norms, *((self.rotary.cos, self.rotary.sin) if self.rotary else ())]
        return sum(a.nbytes for a in arrays if a is not None)


def head_weights(runner: Runner, site: str, layer: int, head: int, q_len: int, k_len: int,
                 source: PatternSource | None = None) -> HeadWeights:
    """The weights of `head` at `site` ("decoder.cross_attn"...) and `layer`, for a run of q_len x k_len. `source`:
    what the model's attention read at that layer (a trace's), whose scale and soft-capping are the model's own."""
    model = getattr(runner, "model", None)
    if model is None:  # a from-scratch model (model/toy/runner.py)
        module = _scratch_attention(runner.toy.model, site, layer)  # type: ignore[attr-defined]
        return _slice(_scratch_affines(module), head, module.n_heads, module.n_heads, module.d_head,
                      1 / math.sqrt(module.d_head), f"1/√{module.d_head}")
    taps = runner.taps  # type: ignore[attr-defined]
    module = taps[Site.of(site).pattern_name(layer)].module
    out_module = taps[f"{Site.of(site).stack}.{layer}.hook_attn_out"].module if hasattr(module, "query") else None
    affines, n_heads, n_kv, d_head = _hf_affines(module, out_module)
    scale, scale_text = _hf_scale(module, d_head, layer)
    if source is not None and not math.isclose(source.scale, scale):  # the scale the model's attention received
        prescaled = getattr(module, "scaling", None)  # OPT scales its queries when projecting, and passes 1
        if source.scale == 1.0 and prescaled:
            w, b = affines["q"]
            affines["q"] = (w * prescaled, None if b is None else b * prescaled)
            scale_text = f"1 (the queries were scaled by {prescaled:.4g} = 1/√{d_head} when projected)"
        else:
            scale_text = f"{source.scale:.4g} (the model's own scale)"
        scale = source.scale
    kinds = getattr(model.config, "layer_types", None)  # each layer's kind, where a model rotates kinds differently
    rotary = _rotary(model, k_len, kinds[layer] if kinds else None) if runner.facts.positional == "rotary" else None
    bias = _t5_bias(model, site, head, q_len, k_len) if hasattr(module, "relative_attention_num_buckets") else None
    weights = _slice(affines, head, n_heads, n_kv, d_head, scale, scale_text, rotary, bias)
    kv_head = head // (n_heads // n_kv)
    return replace(weights, q_norm=_query_key_norm(module, ("q_norm", "q_layernorm"), affines["q"], head, d_head),
                   k_norm=_query_key_norm(module, ("k_norm", "k_layernorm"), affines["k"], kv_head, d_head),
                   softcap=None if source is None else source.softcap)


def _slice(affines: dict[str, Affine], head: int, n_heads: int, n_kv: int, d_head: int, scale: float,
           scale_text: str, rotary: Rotary | None = None, position_bias: np.ndarray | None = None) -> HeadWeights:
    """Cut the head's columns out of whole-layer affines {"q", "k", "v", "o"}."""
    kv_head = head // (n_heads // n_kv)

    def cut(name: str, index: int) -> Affine:
        w, b = affines[name]
        columns = slice(index * d_head, (index + 1) * d_head)
        return w[:, columns], None if b is None else b[columns]

    (w_q, b_q), (w_k, b_k), (w_v, b_v) = cut("q", head), cut("k", kv_head), cut("v", kv_head)
    w_o, b_o = affines["o"]
    return HeadWeights(head, kv_head, n_heads, n_kv, d_head, w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o, scale,
                       scale_text, rotary, position_bias)


def _query_key_norm(module: nn.Module, names: tuple[str, ...], whole: Affine, head: int,
                    d_head: int) -> QueryKeyNorm | None:
    """The RMSNorm the attention module applies to its queries or keys, if it has one (its gain read from what it
    does: w, or 1 + w in Gemma)."""
    norm = next((getattr(module, n) for n in names if isinstance(getattr(module, n, None), nn.Module)), None)
    if norm is None or isinstance(norm, nn.Identity):
        return None
    gain, _ = norm_affine(norm)  # (d_head or heads x d_head,)
    eps, width = norm_eps(norm), len(gain)
    if width == d_head:
        return QueryKeyNorm(gain, eps)
    return QueryKeyNorm(gain[head * d_head:(head + 1) * d_head], eps, whole)


def _affine(layer: nn.Module) -> Affine:
    """A Linear (weight (out, in)) or a GPT-2 Conv1D (weight (in, out)) as x @ W + b."""
    with torch.no_grad(), weights_at_hand(layer):
        weight = layer.weight.detach().float().cpu().numpy()
        bias = None if getattr(layer, "bias", None) is None else layer.bias.detach().float().cpu().numpy()
    return (weight if type(layer).__name__ == "Conv1D" else weight.T), bias


def _scratch_attention(model: nn.Module, site: str, layer: int) -> nn.Module:
    where = Site.of(site)
    block = getattr(model, where.stack).layers[layer]
    return block.cross_attn if where.is_cross else block.attn


def _scratch_affines(module: nn.Module) -> dict[str, Affine]:
    """The fused in_proj, rows [W_Q; W_K; W_V], split in three."""
    w, b = _affine(module.in_proj)  # (d_model, 3 d_model), (3 d_model,)
    d = w.shape[0]
    parts = {name: (w[:, i * d:(i + 1) * d], b[i * d:(i + 1) * d]) for i, name in enumerate("qkv")}
    return parts | {"o": _affine(module.out_proj)}


def _hf_affines(module: nn.Module, out_module: nn.Module | None) -> tuple[dict[str, Affine], int, int, int]:
    """(affines, heads, kv heads, d_head) of a Hugging Face attention module."""
    if hasattr(module, "c_attn"):  # GPT-2: fused (d_model, 3 d_model)
        w, b = _affine(module.c_attn)
        d = w.shape[0]
        affines = {name: (w[:, i * d:(i + 1) * d], b[i * d:(i + 1) * d]) for i, name in enumerate("qkv")}
        return affines | {"o": _affine(module.c_proj)}, module.num_heads, module.num_heads, module.head_dim
    if hasattr(module, "query"):  # BERT: W_O is the next module's
        affines = {"q": _affine(module.query), "k": _affine(module.key), "v": _affine(module.value)}
        return affines | {"o": _affine(out_module)}, module.num_attention_heads, module.num_attention_heads, \
            module.attention_head_size
    if hasattr(module, "relative_attention_num_buckets"):  # T5
        affines = {name: _affine(getattr(module, name)) for name in "qkvo"}
        return affines, module.n_heads, module.n_heads, module.key_value_proj_dim
    if hasattr(module, "q_lin"):  # DistilBERT
        affines = {name: _affine(getattr(module, f"{name}_lin")) for name in "qkv"} | {"o": _affine(module.out_lin)}
        d_head = module.dim // module.n_heads
        return affines, module.n_heads, module.n_heads, d_head
    out = next(getattr(module, n) for n in ("o_proj", "out_proj", "dense", "Wo") if hasattr(module, n))
    d_head = getattr(module, "head_dim", None) or module.head_size  # GPT-NeoX: head_size
    if hasattr(module, "query_key_value"):  # GPT-NeoX: fused, each head's q, k and v side by side
        w, b = _affine(module.query_key_value)  # (d_model, heads x 3 x d_head)
        heads = w.shape[1] // (3 * d_head)
        split = lambda a, i: a.reshape(*a.shape[:-1], heads, 3, d_head)[..., i, :].reshape(*a.shape[:-1], -1)  # noqa: E731
        affines = {name: (split(w, i), None if b is None else split(b, i)) for i, name in enumerate("qkv")}
        return affines | {"o": _affine(out)}, heads, heads, d_head
    fused = getattr(module, "qkv_proj", None) or getattr(module, "Wqkv", None)
    if fused is not None:  # Phi-3, ModernBERT: fused, rows [every head's q; every kv head's k; ... v]
        w, b = _affine(fused)
        heads = getattr(module, "num_heads", None) or module.config.num_attention_heads
        q = heads * d_head
        kv = (w.shape[1] - q) // 2
        bounds = {"q": (0, q), "k": (q, q + kv), "v": (q + kv, q + 2 * kv)}
        affines = {n: (w[:, lo:hi], None if b is None else b[lo:hi]) for n, (lo, hi) in bounds.items()}
        return affines | {"o": _affine(out)}, q // d_head, kv // d_head, d_head
    affines = {name: _affine(getattr(module, f"{name}_proj")) for name in "qkv"} | {"o": _affine(out)}
    return affines, affines["q"][0].shape[1] // d_head, affines["k"][0].shape[1] // d_head, d_head


def _hf_scale(module: nn.Module, d_head: int, layer: int) -> tuple[float, str]:
    """What the family multiplies Q K^T by (GPT-2 may also divide by the layer number; T5 does not scale)."""
    if hasattr(module, "relative_attention_num_buckets"):
        return 1.0, "1 (T5 does not scale: it folds 1/√d_head into its initialisation)"
    if hasattr(module, "scale_attn_weights"):  # GPT-2
        scale, text = (1 / math.sqrt(d_head), f"1/√{d_head}") if module.scale_attn_weights else (1.0, "1")
        if module.scale_attn_by_inverse_layer_idx:
            scale, text = scale / (layer + 1), f"{text} × 1/{layer + 1} (GPT-2's scale_attn_by_inverse_layer_idx)"
        return scale, text
    scaling = getattr(module, "scaling", None)
    if scaling is not None and not math.isclose(scaling, d_head ** -0.5):
        return float(scaling), f"{scaling:g} (the model's own scaling)"
    return 1 / math.sqrt(d_head), f"1/√{d_head}"


def _rotary(model: nn.Module, length: int, layer_type: str | None) -> Rotary:
    """The model's rotary embedding at positions 0..len-1 (model/inspect/positions.py reads the same module), for a
    layer of `layer_type` where the model rotates kinds of layer differently (Gemma 3)."""
    cos, sin, interleaved = rotary_tables(model, length, layer_type)
    return Rotary(cos.float().numpy(), sin.float().numpy(), interleaved)


def _t5_bias(model: nn.Module, site: str, head: int, q_len: int, k_len: int) -> np.ndarray:
    """(q_len, k_len): T5's relative position bias of the head (learned by each stack's first layer; none in
    cross-attention)."""
    where = Site.of(site)
    if where.is_cross:
        return np.zeros((q_len, k_len), dtype=np.float32)
    first = getattr(model.base_model, where.stack).block[0].layer[0].SelfAttention
    table = first.relative_attention_bias  # an Embedding (buckets, heads)
    with torch.no_grad(), exclusive(table):
        bias = first.compute_bias(q_len, k_len, device=computing_device(table))
    return bias[0, head].float().cpu().numpy()  # (1, heads, q_len, k_len) -> (q_len, k_len)
