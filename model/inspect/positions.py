"""How a loaded model tells positions apart, read from its own weights and modules (never changed).

From-scratch models add a fixed sinusoidal table (their `pos_table` buffer); BERT, GPT-2 and BART add a learned
table; Marian adds a fixed sinusoid laid out differently; Llama-style models rotate queries and keys (rotary);
T5 adds a learned bias per relative distance to the attention scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

SchemeKind = Literal["sinusoidal", "learned", "rotary", "relative"]
BART_OFFSET = 2  # BART's position table keeps two rows before position 0 (a quirk of its padding_idx)


@dataclass(frozen=True)
class PositionScheme:
    """What a model does with positions, and the numbers behind it."""

    kind: SchemeKind
    source: str  # where the numbers come from, e.g. "the model's pos_table buffer"
    about: str  # what it is, in a sentence or two
    table: np.ndarray | None = None  # (positions, d_model) float32: row p is added at position p (absolute schemes)
    halves: bool = False  # a sinusoid with every sine first, then every cosine (Marian), not interleaved
    inv_freq: np.ndarray | None = None  # rotary: (head_dim / 2,) radians per position of each dimension pair
    rotary_base: float = 0.0  # rotary: θ in inv_freq_i = θ^(-2i / head_dim)
    rotary_profile: np.ndarray | None = None  # rotary: (len,) q·k of q = k = (1, …, 1) at distance 0 .. len-1
    rotary_spread: float = 0.0  # rotary: how much q·k varies among pairs at the same distance (0: only distance counts)
    bias: np.ndarray | None = None  # relative: (heads, 2 len - 1) bias for key - query = -(len-1) .. len-1

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (for the server's byte-bounded cache)."""
        arrays = (self.table, self.inv_freq, self.rotary_profile, self.bias)
        return sum(a.nbytes for a in arrays if a is not None)


def position_scheme(runner: Any, stack: str, length: int) -> PositionScheme:
    """The scheme of `runner`'s `stack` ("encoder" or "decoder"); rotary scores and relative biases cover
    `length` positions."""
    toy = getattr(runner, "toy", None)
    if toy is not None:
        table = getattr(toy.model, stack).pos_table  # (max_len, d_model)
        return PositionScheme("sinusoidal", f"{stack}.pos_table (a buffer)", "A fixed table computed once from the "
                              "formula and added to the token embeddings (× √d_model); nothing about it is learned.",
                              table=table.detach().cpu().float().numpy())
    model = runner.model.base_model
    model_type = runner.model.config.model_type
    if model_type in ("llama", "mistral", "qwen2"):
        return _rotary(runner.model, length)
    if model_type == "t5":
        return _t5(getattr(model, stack), length)
    return _absolute(model, model_type, stack)


def _weight(module: torch.nn.Module) -> np.ndarray:
    return module.weight.detach().cpu().float().numpy()


def _absolute(model: torch.nn.Module, model_type: str, stack: str) -> PositionScheme:
    """The tables added to the token embeddings: learned (BERT, GPT-2, BART) or fixed (Marian)."""
    if model_type == "bert":
        return PositionScheme("learned", "embeddings.position_embeddings", "A learned table added to the token "
                              "embeddings, with a learned token-type (segment) vector; LayerNorm then normalises the "
                              "sum.", table=_weight(model.embeddings.position_embeddings))
    if model_type == "gpt2":
        return PositionScheme("learned", "wpe", "A learned table added to the token embeddings.",
                              table=_weight(model.wpe))
    positions = getattr(model, stack).embed_positions
    if model_type == "marian":
        return PositionScheme("sinusoidal", f"{stack}.embed_positions", "A fixed sinusoid as in the paper, laid out "
                              "differently: the sines in the first half of the dimensions, the cosines in the second.",
                              table=_weight(positions), halves=True)
    return PositionScheme("learned", f"{stack}.embed_positions (rows from {BART_OFFSET})",
                          f"A learned table added to the token embeddings; position p reads row p + {BART_OFFSET} "
                          "(BART keeps two rows before position 0).", table=_weight(positions)[BART_OFFSET:])


def _rotary(causal_lm: torch.nn.Module, length: int) -> PositionScheme:
    """Rotary embedding, from the model's own rotary module: frequencies and q·k of q = k = (1, …, 1)."""
    config, rotary = causal_lm.config, causal_lm.base_model.rotary_emb
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameters = getattr(config, "rope_parameters", None) or {}
    base = float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    with torch.inference_mode():
        positions = torch.arange(length)[None]  # (1, len)
        cos, sin = rotary(torch.zeros(1, length, head_dim), positions)  # (1, len, head_dim) each
        vector = torch.ones(length, head_dim)  # the same q and k at every position
        half = head_dim // 2
        rotated = vector * cos[0] + torch.cat([-vector[:, half:], vector[:, :half]], -1) * sin[0]  # (len, head_dim)
        scores = (rotated @ rotated.T).double().numpy()  # (len, len): q at position m · k at position n
    diagonals = [np.diagonal(scores, -d) for d in range(length)]  # distance m - n = d
    return PositionScheme("rotary", "rotary_emb (inv_freq)", "Nothing is added to the embeddings. In every layer, "
                          "each pair of dimensions of a head's query and key is rotated by the angle position × its "
                          "frequency, so q·k depends on the distance between them, not on where they are.",
                          inv_freq=rotary.inv_freq.detach().cpu().double().numpy(), rotary_base=base,
                          rotary_profile=np.array([d[0] for d in diagonals]),
                          rotary_spread=max(float(np.ptp(d)) for d in diagonals))


def _t5(stack: torch.nn.Module, length: int) -> PositionScheme:
    """T5's learned bias per head and relative-distance bucket, added to the scores (from layer 0, shared by all)."""
    attention = stack.block[0].layer[0].SelfAttention
    relative = torch.arange(-(length - 1), length)  # key - query
    buckets = attention._relative_position_bucket(relative, bidirectional=not attention.is_decoder,
                                                  num_buckets=attention.relative_attention_num_buckets,
                                                  max_distance=attention.relative_attention_max_distance)
    with torch.inference_mode():
        bias = attention.relative_attention_bias(buckets).T  # (heads, 2 len - 1)
    return PositionScheme("relative", "block 0's relative_attention_bias", "Nothing is added to the embeddings. "
                          "Each head adds a learned number to the score of a query–key pair, chosen by their "
                          "distance (bucketed: exact up close, logarithmic far away); every layer reuses layer 0's.",
                          bias=bias.float().cpu().numpy())
