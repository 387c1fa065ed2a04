"""One attention head's own weights, read from the loaded model of any supported family, as numpy.

Every family stores W_Q, W_K, W_V and W_O in its own way: the from-scratch model as one fused `in_proj` (rows
[W_Q; W_K; W_V]) and `out_proj`; a Hugging Face model as its family's adapter reads them (model/hf/families/: separate,
fused, transposed, W_O outside attention, and the scale). `head_weights` returns them all in one layout, x @ W + b,
with what the model does around QK^T: its scale, rotation (none in a NoPE layer), position bias, query/key norms
(before the rotation, or after it: Llama 4), its queries' temperature (Llama 4), its keys' multiplier (Falcon-H1),
soft-capping. Where a block hands attention its norm's output scaled (Falcon-H1's attention_in_multiplier), W_Q, W_K
and W_V are read times that scale, so that they map the norm's output onto what the projections made.

Nothing here changes the model: weights are copied out under `torch.no_grad`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from torch import nn

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.families import adapter_of
from attention_atlas.model.hf.families.adapter import Adapter, Affine, LayerWeights, affine
from attention_atlas.model.hf.nope import l2_norm_eps, query_scales, rotates
from attention_atlas.model.hf.taps import norm_eps
from attention_atlas.model.inspect.norm_output import norm_affine
from attention_atlas.model.inspect.rotary import rotary_tables


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
class LatentHead:
    """Multi-head latent attention (DeepSeek-V2/V3) before a head's own weights: the queries' low-rank latent
    X W_qa and its RMSNorm (where the model has them: else W_Q reads X), the keys' and values' latent (the first
    `rank` columns of X W_kva, through its RMSNorm) and the rotary key part every head shares (its last `rope`).
    The head's W_Q (q_rank or d_model, nope + rope) makes [nope | rope] queries; W_K (rank, nope) and W_V (rank,
    d_value) read the normalised latent; the key is [latent W_K | shared rotary part]."""

    q_a: Affine | None  # (d_model, q_rank) every head's
    q_norm: QueryKeyNorm | None  # gain (q_rank,)
    kv_a: Affine  # (d_model, rank + rope)
    kv_norm: QueryKeyNorm  # gain (rank,)
    rank: int
    nope: int
    rope: int
    deinterleaved: bool  # the rotated pairs (2i, 2i + 1) laid out [evens | odds] after the rotation (V3)


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
    position_bias: np.ndarray | None = None  # (q_len, k_len) added to the scores (T5's relative buckets, ALiBi,
    # DeBERTa's position terms), else None
    q_norm: QueryKeyNorm | None = None
    k_norm: QueryKeyNorm | None = None
    softcap: float | None = None  # scores capped to c tanh(score / c) before the mask (Gemma 2)
    l2_eps: float | None = None  # q and k divided by √(mean² + ε) after the rotation, no gain (Llama 4's qk-norm)
    query_scale: np.ndarray | None = None  # (q_len,) each query's factor after that (Llama 4's temperature tuning)
    sink: float | None = None  # the head's learned sink logit (GPT-OSS): one more key of every row's softmax, dropped
    latent: LatentHead | None = None  # multi-head latent attention: w_q, w_k, w_v then read latents (LatentHead)
    gate: Affine | None = None  # (d_model, heads x d_head): every head's output x sigmoid(X W_G + b_G) before W_O
    key_scale: float = 1.0  # what the keys are multiplied by after their projection (Falcon-H1's key_multiplier)

    @property
    def d_value(self) -> int:
        """A value head's width (narrower than d_head in multi-head latent attention)."""
        return self.w_v.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (a cache counts them)."""
        norms = [a for n in (self.q_norm, self.k_norm) if n is not None for a in (n.gain, *(n.whole or ()))]
        latent = [] if self.latent is None else [*(self.latent.q_a or ()), self.latent.kv_a[0],
                                                   self.latent.kv_norm.gain]
        arrays = [*(self.gate or ()), self.w_q, self.b_q, self.w_k, self.b_k, self.w_v, self.b_v, self.w_o, self.b_o,
                  self.position_bias, self.query_scale, *norms, *latent,
                  *((self.rotary.cos, self.rotary.sin) if self.rotary else ())]
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
    module, adapter, layer_weights = _hf_layer(runner, site, layer)
    layer_weights = _reading_scaled(layer_weights, float(getattr(model.config, "attention_in_multiplier", 1.0)))
    scale, scale_text = layer_weights.scale, layer_weights.scale_text
    if source is not None and not math.isclose(source.scale, scale):  # the scale the model's attention received
        scale, scale_text = source.scale, f"{source.scale:.4g} (the model's own scale)"
    kinds = getattr(model.config, "layer_types", None)  # each layer's kind, where a model rotates kinds differently
    rotated = runner.facts.positional == "rotary" and rotates(module)  # not in a NoPE layer (Llama 4)
    rotary = _rotary(model, k_len, kinds[layer] if kinds else None) if rotated else None
    bias = adapter.score_bias(model, site, head, q_len, k_len)
    if bias is None and source is not None and source.bias is not None:  # computed from the run (DeBERTa's terms)
        bias = np.asarray(source.bias[head], np.float32)
    if layer_weights.latent is not None:
        return _latent(layer_weights, head, scale, scale_text, rotary)
    weights = _slice(layer_weights.affines, head, layer_weights.n_heads, layer_weights.n_kv_heads,
                     layer_weights.d_head, scale, scale_text, rotary, bias)
    d_head, affines = layer_weights.d_head, layer_weights.affines
    return replace(weights, q_norm=_query_key_norm(module, ("q_norm", "q_layernorm"), affines["q"], head, d_head),
                   k_norm=_query_key_norm(module, ("k_norm", "k_layernorm"), affines["k"], weights.kv_head, d_head),
                   softcap=None if source is None else source.softcap, l2_eps=l2_norm_eps(module),
                   query_scale=query_scales(module, q_len),
                   sink=None if source is None or source.sinks is None else float(source.sinks[head]),
                   gate=layer_weights.gate, key_scale=float(getattr(module, "key_multiplier", 1.0)))


def output_projection(runner: Runner, site: str, layer: int) -> Affine:
    """The layer's W_O (heads x d_head, d_model) and its bias: what turns the concatenated heads' z (each head's
    d_head rows) into the attention's output."""
    model = getattr(runner, "model", None)
    if model is None:  # a from-scratch model
        return affine(_scratch_attention(runner.toy.model, site, layer).out_proj)  # type: ignore[attr-defined]
    return _hf_layer(runner, site, layer)[2].affines["o"]


def _hf_layer(runner: Runner, site: str, layer: int) -> tuple[nn.Module, Adapter, LayerWeights]:
    """A Hugging Face model's attention module at `site` and `layer`, its family's adapter, and what the adapter reads
    of its weights. A block that offers no hook_attn_out (it adds attention's output scaled, as Granite 4, or beside
    Mamba's, as Falcon-H1) keeps W_O in the attention module, where the adapter finds its output projection."""
    taps, adapter = runner.taps, adapter_of(runner.model.config.model_type)  # type: ignore[attr-defined]
    where = Site.of(site)
    module = taps[where.pattern_name(layer)].module
    attn_out = taps.get(f"{where.stack}.{layer}.hook_attn_out")
    return module, adapter, adapter.layer_weights(module, module if attn_out is None else attn_out.module, layer)


def _reading_scaled(layers: LayerWeights, factor: float) -> LayerWeights:
    """The layer's weights where attention reads `factor` x its norm's output (Falcon-H1's attention_in_multiplier):
    W_Q, W_K, W_V and a gate's W_G times `factor`, their biases as they are, so that each maps the norm's output onto
    what its projection made."""
    if factor == 1.0:
        return layers
    affines = {name: (w * factor if name in ("q", "k", "v") else w, b) for name, (w, b) in layers.affines.items()}
    gate = None if layers.gate is None else (layers.gate[0] * factor, layers.gate[1])
    return replace(layers, affines=affines, gate=gate)


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


def _latent(layers: LayerWeights, head: int, scale: float, scale_text: str, rotary: Rotary | None) -> HeadWeights:
    """One head of multi-head latent attention: its columns of q_proj/q_b_proj and kv_b_proj, and the latents."""
    found, n = layers.latent, layers.n_heads
    assert found is not None

    def cut(name: str) -> np.ndarray:
        w = layers.affines[name][0]
        width = w.shape[1] // n
        return w[:, head * width:(head + 1) * width]

    def norm(module: nn.Module | None) -> QueryKeyNorm | None:
        return None if module is None else QueryKeyNorm(norm_affine(module)[0], norm_eps(module))

    kv_norm = norm(found.kv_norm)
    assert kv_norm is not None
    latent = LatentHead(found.q_a, norm(found.q_norm), found.kv_a, kv_norm, found.rank, found.nope, found.rope,
                        found.deinterleaved)
    w_o, b_o = layers.affines["o"]
    return HeadWeights(head, head, n, n, layers.d_head, cut("q"), None, cut("k"), None, cut("v"), None, w_o, b_o,
                       scale, scale_text, rotary, latent=latent)


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


def _scratch_attention(model: nn.Module, site: str, layer: int) -> nn.Module:
    where = Site.of(site)
    block = getattr(model, where.stack).layers[layer]
    return block.cross_attn if where.is_cross else block.attn


def _scratch_affines(module: nn.Module) -> dict[str, Affine]:
    """The fused in_proj, rows [W_Q; W_K; W_V], split in three."""
    w, b = affine(module.in_proj)  # (d_model, 3 d_model), (3 d_model,)
    d = w.shape[0]
    parts = {name: (w[:, i * d:(i + 1) * d], b[i * d:(i + 1) * d]) for i, name in enumerate("qkv")}
    return parts | {"o": affine(module.out_proj)}


def _rotary(model: nn.Module, length: int, layer_type: str | None) -> Rotary:
    """The model's rotary embedding at positions 0..len-1 (model/inspect/positions.py reads the same module), for a
    layer of `layer_type` where the model rotates kinds of layer differently (Gemma 3)."""
    cos, sin, interleaved = rotary_tables(model, length, layer_type)
    return Rotary(cos.float().numpy(), sin.float().numpy(), interleaved)
