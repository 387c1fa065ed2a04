"""How a loaded model tells positions apart, read from its own weights and modules (never changed).

From-scratch models add a fixed sinusoidal table (their `pos_table` buffer); BERT, GPT-2, BART and OPT add a learned
table; Marian and Pegasus add a fixed sinusoid laid out differently; Llama-style models rotate queries and keys
(rotary, on all of a head's dimensions or a part); T5 adds a learned bias per relative distance to the scores, BLOOM a
fixed slope per head (ALiBi), DeBERTa terms of its queries and keys with an embedding per relative distance (each
family's adapter, model/hf/families/, reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from attention_atlas.model.hf.families import adapter_of
from attention_atlas.model.hf.nope import nope_layers, nope_words
from attention_atlas.model.hf.placement import weights_at_hand
from attention_atlas.model.inspect.rotary import rotary_tables, rotate

SchemeKind = Literal["sinusoidal", "learned", "rotary", "relative", "none"]


@dataclass(frozen=True)
class PositionScheme:
    """What a model does with positions, and the numbers behind it."""

    kind: SchemeKind
    source: str  # where the numbers come from, e.g. "the model's pos_table buffer"
    about: str  # what it is, in a sentence or two
    table: np.ndarray | None = None  # (positions, d_model) float32: row p is added at position p (absolute schemes)
    halves: bool = False  # a sinusoid with every sine first, then every cosine (Marian), not interleaved
    inv_freq: np.ndarray | None = None  # rotary: (rotated dims / 2,) radians per position of each dimension pair
    interleaved: bool = False  # rotary: pairs are dimensions 2i and 2i + 1 (GPT-J), not i and i + r/2 (Llama)
    rotary_base: float = 0.0  # rotary: θ in inv_freq_i = θ^(-2i / head_dim)
    rotary_profile: np.ndarray | None = None  # rotary: (len,) q·k of q = k = (1, …, 1) at distance 0 .. len-1
    rotary_spread: float = 0.0  # rotary: how much q·k varies among pairs at the same distance (0: only distance counts)
    bias: np.ndarray | None = None  # relative: (heads, 2 len - 1) bias for key - query = -(len-1) .. len-1
    buckets: np.ndarray | None = None  # relative: (2 len - 1,) the relative position embedding each distance reads
    formula: str = ""  # relative: the score of query i and key j, in LaTeX
    nope: str = ""  # rotary: what the layers that do not rotate do, in words (Llama 4's NoPE layers); "" for none

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (for the server's byte-bounded cache)."""
        arrays = (self.table, self.inv_freq, self.rotary_profile, self.bias, self.buckets)
        return sum(a.nbytes for a in arrays if a is not None)


def bias_name(positional: str) -> str:
    """What the bias a model adds to its scores for positions is called, from its facts' `positional`: "ALiBi",
    DeBERTa's terms ("c2p + p2c", from "disentangled relative positions (c2p + p2c)"), or "relative position"."""
    if positional == "ALiBi":
        return "ALiBi"
    if "disentangled relative positions (" in positional:
        return positional.rsplit("(", 1)[1].rstrip(")")
    return "relative position"


def position_scheme(runner: Any, stack: str, length: int) -> PositionScheme:
    """The scheme of `runner`'s `stack` ("encoder" or "decoder"); rotary scores and relative biases cover
    `length` positions."""
    toy = getattr(runner, "toy", None)
    if toy is not None:
        table = getattr(toy.model, stack).pos_table  # (max_len, d_model)
        return PositionScheme("sinusoidal", f"{stack}.pos_table (a buffer)", "A fixed table computed once from the "
                              "formula and added to the token embeddings (× √d_model); nothing about it is learned.",
                              table=table.detach().cpu().float().numpy())
    family, model = runner.family, runner.model.base_model
    if family.positional == "rotary":
        return _rotary(runner.model, length)
    relative = adapter_of(runner.model.config.model_type).relative_positions(runner.model, stack, length)
    if relative is not None:
        return PositionScheme("relative", relative.source, relative.about, bias=relative.bias,
                              buckets=relative.buckets, formula=relative.formula)
    place = family.stack_taps.get(stack, {}).get("hook_pos_embed")
    if place is None:
        return PositionScheme("none", "—", "No position table and no rotation were found in this model: it may tell "
                              "positions apart only through its causal mask.")
    return _absolute(model, place[0])


def _weight(module: torch.nn.Module) -> np.ndarray:
    with weights_at_hand(module):
        return module.weight.detach().cpu().float().numpy()


def _absolute(model: torch.nn.Module, path: str) -> PositionScheme:
    """The table added to the token embeddings, at `path`: learned (BERT, GPT-2, BART, OPT ...) or a fixed sinusoid
    with every sine first, then every cosine (Marian, Pegasus). Position p reads row p + offset: BART and OPT keep two
    rows before position 0, RoBERTa its padding row and those before it."""
    module = model.get_submodule(path)
    padding = getattr(module, "padding_idx", None)
    offset = int(getattr(module, "offset", 0) or (padding + 1 if padding is not None else 0))
    table = _weight(module)[offset:]
    shift = f" (rows from {offset})" if offset else ""
    if "sinusoidal" in type(module).__name__.lower():
        return PositionScheme("sinusoidal", f"{path}{shift}", "A fixed sinusoid as in the paper, laid out "
                              "differently: the sines in the first half of the dimensions, the cosines in the second.",
                              table=table, halves=True)
    about = "A learned table added to the token embeddings"
    about += f"; position p reads row p + {offset}." if offset else "."
    parent = model.get_submodule(path.rsplit(".", 1)[0]) if "." in path else model
    if hasattr(parent, "token_type_embeddings"):
        about += " A learned token-type (segment) vector is added too; LayerNorm then normalises the sum."
    return PositionScheme("learned", f"{path}{shift}", about, table=table)


def _rotary(causal_lm: torch.nn.Module, length: int) -> PositionScheme:
    """Rotary embedding, from the model's own rotary module: each dimension pair's frequency (the angle it turns by
    from position 0 to 1) and q·k of q = k = (1, …, 1). Pairs are dimensions i and i + r/2 of the r rotated ones
    (Llama and most), or 2i and 2i + 1 (GPT-J, Cohere); r is every dimension of a head or a part of them."""
    config = causal_lm.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameters = getattr(config, "rope_parameters", None) or {}
    if "full_attention" in parameters:  # per kind of layer (Gemma 3): the full layers'
        parameters = parameters["full_attention"]
    base = float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    cos, sin, interleaved = rotary_tables(causal_lm, max(length, 2))  # (len, r) each
    rotated_dims = cos.shape[-1]
    first = slice(0, None, 2) if interleaved else slice(0, rotated_dims // 2)
    inv_freq = torch.atan2(sin[1, first], cos[1, first])  # (r / 2,): under 1 radian a position, so read exactly
    rotated = rotate(torch.ones(len(cos), rotated_dims, dtype=torch.float64), cos, sin, interleaved)  # (len, r):
    scores = (rotated @ rotated.T)[:length, :length].numpy()  # the same q = k at every position; q_m · k_n
    diagonals = [np.diagonal(scores, -d) for d in range(length)]  # distance m - n = d
    part = (f" Only the first {rotated_dims} of each head's {head_dim} dimensions are rotated; the rest carry no "
            "position." if rotated_dims < head_dim else "")
    every = "every rotary layer (see NoPE below)" if nope_layers(config) else "every layer"
    return PositionScheme("rotary", "rotary_emb", f"Nothing is added to the embeddings. In {every}, "
                          "each pair of dimensions of a head's query and key is rotated by the angle position × its "
                          "frequency, so q·k depends on the distance between them, not on where they are." + part,
                          inv_freq=inv_freq.numpy(), rotary_base=base,
                          rotary_profile=np.array([d[0] for d in diagonals]),
                          rotary_spread=max(float(np.ptp(d)) for d in diagonals), interleaved=interleaved,
                          nope=nope_words(config))
