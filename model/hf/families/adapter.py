"""What the app knows about one family of Hugging Face models, in one place: an `Adapter`.

An adapter answers, for the model types it lists: where each hook name is read (its `Family`: a table, or the
layout a probe pass finds, model/hf/discovery.py), how its attention layer stores W_Q, W_K, W_V and W_O (separate,
fused, transposed; the attention scale), what its config calls its sizes, and what it adds to the scores for
positions beyond what the probe and the rotary module show. The base class is the default every type gets that no
adapter lists: hooks found by discovery, separate `q_proj`/`k_proj`/`v_proj` projections and an output projection,
1/√d_head, the config's standard names. A family module (one file beside this one) overrides what differs.

Norm weights and rotary tables are read from what the modules do (model/inspect/norm_output.py,
model/inspect/rotary.py), so no adapter describes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from attention_atlas.model.hf.discovery import discover
from attention_atlas.model.hf.placement import weights_at_hand
from attention_atlas.model.hf.taps import Family

Affine = tuple[np.ndarray, np.ndarray | None]  # (W (d_in, d_out), b (d_out,) or None): x @ W + b


@dataclass(frozen=True)
class LayerWeights:
    """One attention layer's projections, whole (every head's columns), as x @ W + b, and its scale."""

    affines: dict[str, Affine]  # "q" (d_model, heads x d_head), "k", "v" (d_model, kv_heads x d_head), "o"
    n_heads: int
    n_kv_heads: int
    d_head: int
    scale: float  # what Q K^T is multiplied by
    scale_text: str  # how a person reads it: "1/√8", "1 (T5 does not scale)"
    latent: Latent | None = None  # multi-head latent attention: "q" is then q_b_proj (or q_proj), "k"/"v" kv_b_proj's
    gate: Affine | None = None  # (d_model, heads x d_head): each head's output x sigmoid(X W_G + b) before W_O, where
    # the query projection makes the gate beside each head's query (Qwen3-Next, Qwen3.5)


@dataclass(frozen=True)
class Latent:
    """Multi-head latent attention (DeepSeek-V2/V3): queries from X, or from a low-rank latent X W_qa through its
    RMSNorm; keys and values from one latent a token (the first `rank` columns of X W_kva, through its RMSNorm) and one
    rotary key part every head shares (its last `rope` columns); each query and key head is [nope | rope] wide."""

    q_a: Affine | None  # (d_model, q_rank): q_a_proj, None where q_proj reads X itself
    q_norm: nn.Module | None  # q_a_layernorm
    kv_a: Affine  # (d_model, rank + rope): kv_a_proj_with_mqa
    kv_norm: nn.Module  # kv_a_layernorm
    rank: int
    nope: int
    rope: int
    deinterleaved: bool  # the rotary pairs (2i, 2i + 1), laid out after the rotation as [evens | odds] (V3)


@dataclass(frozen=True)
class Sizes:
    """A stack's sizes, whatever its config calls them."""

    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int  # a query or key head's width
    d_ff: int
    d_value: int | None = None  # a value head's width where it is not d_head (multi-head latent attention)

    @property
    def value_width(self) -> int:
        """A value head's width."""
        return self.d_value or self.d_head


@dataclass(frozen=True)
class RelativePositions:
    """What a family adds to the scores per distance key - query, as the Positional encoding page shows it: a learned
    bias (T5), a fixed slope per head (ALiBi), or, where the terms depend on the tokens too (DeBERTa), which relative
    position embedding each distance reads."""

    source: str  # where it is read
    about: str  # what it is, in a sentence or two
    formula: str  # the score of query i and key j, in LaTeX
    bias: np.ndarray | None = None  # (heads, 2 len - 1) float32: distances -(len-1) .. len-1
    buckets: np.ndarray | None = None  # (2 len - 1,) int: the relative position embedding each distance reads


def alibi_positions(slopes: np.ndarray, length: int, source: str) -> RelativePositions:
    """ALiBi over `length` positions from each head's slope (heads,): slope x (key - query), as the scores add it;
    `source` says where the slopes come from."""
    distance = np.arange(-(length - 1), length)  # key - query
    shown = ", ".join(f"{s:.3g}" for s in slopes[:8]) + (" …" if len(slopes) > 8 else "")
    return RelativePositions(
        source,
        "Nothing is added to the embeddings, and nothing here is learned. Each head adds its slope × (key − query) "
        f"to every score (ALiBi): a key d tokens back costs d × slope. The slopes ({shown}) shrink geometrically "
        "from head to head, so the first heads look near and the last ones far. Keys ahead would gain as much; "
        "the causal mask hides them.", r"\mathrm{score}_{ij}=\frac{q_i\cdot k_j}{\sqrt{d_k}}+m_h\,(j-i)",
        bias=(slopes[:, None] * distance[None]).astype(np.float32))


def alibi_bias(slope: float, q_len: int, k_len: int) -> np.ndarray:
    """(q_len, k_len): ALiBi of one head, its slope x (key position - query position), the queries being the last
    q_len of the k_len positions."""
    distance = np.arange(k_len)[None] - np.arange(k_len - q_len, k_len)[:, None]
    return (slope * distance).astype(np.float32)


def affine(layer: nn.Module) -> Affine:
    """A Linear (weight (out, in)) or a GPT-2 Conv1D (weight (in, out)) as x @ W + b, float32 numpy, read-only: a
    float32 weight on the CPU is the model's own memory (shared by every session), not a copy."""
    with torch.no_grad(), weights_at_hand(layer):
        weight = _read_only(layer.weight.detach().float().cpu().numpy())
        bias = None if getattr(layer, "bias", None) is None else _read_only(layer.bias.detach().float().cpu().numpy())
    return (weight if type(layer).__name__ == "Conv1D" else weight.T), bias


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def config_int(config: Any, *names: str, default: int = 0) -> int:
    """The first of `names` the config sets to a positive integer, else `default`."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def split_columns(whole: Affine, widths: tuple[int, ...]) -> list[Affine]:
    """An affine's columns cut in consecutive blocks of `widths` (a fused projection: [q | k | v])."""
    w, b = whole
    bounds = np.cumsum((0, *widths))
    return [(w[:, lo:hi], None if b is None else b[lo:hi]) for lo, hi in pairwise(bounds)]


def interleaved(whole: Affine, d_head: int) -> list[Affine]:
    """A fused projection whose columns hold each head's query, key and value side by side ((heads, 3, d_head):
    GPT-NeoX, BLOOM) as the q, k and v affines, each (d_model, heads x d_head)."""

    def part(a: np.ndarray, i: int) -> np.ndarray:
        return a.reshape(*a.shape[:-1], -1, 3, d_head)[..., i, :].reshape(*a.shape[:-1], -1)

    w, b = whole
    return [(part(w, i), None if b is None else part(b, i)) for i in range(3)]


class Adapter:
    """The default family: every model type that no family module lists (see the module's docstring)."""

    name: ClassVar[str] = "discovered"
    model_types: ClassVar[tuple[str, ...]] = ()  # the `model_type`s of the configs this adapter describes
    kind: ClassVar[str | None] = None  # "encoder", "decoder", "encoder-decoder"; None: from transformers' tables
    own_attention: ClassVar[bool] = False  # computes attention in its own code: loaded eager, routed by `prepare`
    adds_score_terms: ClassVar[bool] = False  # its scores add terms of the tokens beyond Q K^T (`score_terms`)

    def prepare(self, model: nn.Module) -> None:
        """What the family changes in a model once, as it loads (never per run): where it computes attention in its
        own code, its attention modules made to compute it through the app's attention function
        (model/hf/own_attention.py); where its blocks share one layer, a module for each. UserError for a layout of
        the family that cannot be read."""

    def notes(self, config: Any) -> dict[str, str]:
        """What the model card says of the family's layout beyond the facts' fields: for multi-head latent attention
        (DeepSeek-V2/V3 and the types that share their config names), where its keys and values come from."""
        latent, rotated = config_int(config, "kv_lora_rank"), config_int(config, "qk_rope_head_dim")
        if not latent:
            return {}
        sizes, queries = self.sizes(config, "decoder"), config_int(config, "q_lora_rank")
        return {"multi-head latent attention": (
            f"each head's queries and keys are {sizes.d_head} numbers, {rotated} of them rotated (the rest carry no "
            f"position), its values {sizes.value_width}; keys and values are made from one latent of {latent} numbers "
            "a token" + (f", queries from one of {queries}" if queries else ""))}

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        """Where the hooks of a loaded model are."""
        return discover(model, kind)

    def layer_weights(self, attention: nn.Module, attn_out: nn.Module, layer: int) -> LayerWeights:
        """The projections of the attention module `attention` (where its pattern is read); `attn_out` is the module
        whose output is the layer's hook_attn_out (where a family keeps W_O outside attention, as BERT)."""
        out = next(getattr(attention, n) for n in ("o_proj", "out_proj", "dense") if hasattr(attention, n))
        if getattr(attention, "kv_b_proj", None) is not None:
            return self._latent_weights(attention, affine(out), layer)
        affines = {name: affine(getattr(attention, f"{name}_proj")) for name in "qkv"} | {"o": affine(out)}
        d_head, gate = attention.head_dim, None
        if affines["q"][0].shape[1] == 2 * affines["o"][0].shape[0]:  # each head's [query | gate] (heads, 2, d_head)
            w, b = affines["q"]
            part = [(w.reshape(len(w), -1, 2, d_head)[:, :, i].reshape(len(w), -1),
                     None if b is None else b.reshape(-1, 2, d_head)[:, i].reshape(-1)) for i in range(2)]
            affines, gate = affines | {"q": part[0]}, part[1]
        scale, text = self.scale(attention, d_head, layer)
        return LayerWeights(affines, affines["q"][0].shape[1] // d_head, affines["k"][0].shape[1] // d_head, d_head,
                            scale, text, gate=gate)

    def _latent_weights(self, attention: nn.Module, out: Affine, layer: int) -> LayerWeights:
        """Multi-head latent attention's projections (`Latent`); "k" and "v" the key and value columns of
        kv_b_proj (rank, heads x nope and heads x v_head_dim)."""
        nope, rope, heads = attention.qk_nope_head_dim, attention.qk_rope_head_dim, attention.num_heads
        w, _ = affine(attention.kv_b_proj)  # (rank, heads x (nope + v)): each head's k_nope, then its v
        per_head = w.reshape(len(w), heads, -1)
        queries = attention.q_proj if attention.q_proj is not None else attention.q_b_proj
        affines = {"q": affine(queries), "k": (per_head[..., :nope].reshape(len(w), -1), None),
                   "v": (per_head[..., nope:].reshape(len(w), -1), None), "o": out}
        q_a = None if attention.q_proj is not None else affine(attention.q_a_proj)
        latent = Latent(q_a, getattr(attention, "q_a_layernorm", None), affine(attention.kv_a_proj_with_mqa),
                        attention.kv_a_layernorm, attention.kv_lora_rank, nope, rope,
                        bool(getattr(attention.config, "rope_interleave", False)))
        scale, text = self.scale(attention, nope + rope, layer)
        return LayerWeights(affines, heads, heads, nope + rope, scale, text, latent)

    def scale(self, attention: nn.Module, d_head: int, layer: int) -> tuple[float, str]:
        """What Q K^T is multiplied by, and how a person reads it: the module's own `scaling` where it is not
        1/√d_head (Gemma 2's query_pre_attn_scalar), else 1/√d_head."""
        scaling = getattr(attention, "scaling", None)
        if scaling is not None and not math.isclose(scaling, d_head ** -0.5):
            return float(scaling), f"{scaling:g} (the model's own scaling)"
        return 1 / math.sqrt(d_head), f"1/√{d_head}"

    def sizes(self, config: Any, stack: str) -> Sizes:
        """The sizes of `stack` ("encoder"/"decoder"), read through the config's standard names (transformers maps
        GPT-2's n_head, T5's num_heads ... onto them); the MLP's width as Llama (intermediate_size), GPT-2 and GPT-J
        (n_inner) or OPT (ffn_dim) name it, else 4 d_model. Multi-head latent attention (DeepSeek-V2/V3): query and
        key heads qk_nope_head_dim + qk_rope_head_dim wide, value heads v_head_dim."""
        heads = config_int(config, "num_attention_heads")
        d_model = config_int(config, "hidden_size")
        latent_width = config_int(config, "qk_nope_head_dim") + config_int(config, "qk_rope_head_dim")  # MLA: q, k
        d_head = latent_width or config_int(config, "head_dim", default=d_model // max(heads, 1))
        return Sizes(heads, config_int(config, "num_key_value_heads", default=heads), d_model, d_head,
                     config_int(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * d_model),
                     config_int(config, "v_head_dim") or None)

    def position_limit(self, config: Any) -> int:
        """The most positions the model reads (0: no limit of its own, as T5's relative buckets)."""
        return config_int(config, "max_position_embeddings")

    def relative_positions(self, model: nn.Module, stack: str, length: int) -> RelativePositions | None:
        """The bias added to the scores per relative distance for `length` positions, where the family learns one."""
        return None

    def score_bias(self, model: nn.Module, site: str, head: int, q_len: int, k_len: int) -> np.ndarray | None:
        """(q_len, k_len): what `head` at `site` adds to its scores for positions (None: nothing)."""
        return None

    def score_terms(self, model: nn.Module, layer: int, query: np.ndarray, key: np.ndarray) -> dict[str, np.ndarray]:
        """The terms a layer's scores add to Q K^T that depend on the tokens as well as on positions (DeBERTa's
        content-to-position and position-to-content), each (heads, q_len, k_len) as added (scaled), computed from the
        layer's queries and keys (heads, len, d_head); none for most families."""
        return {}
