"""Why a head attends there: one attention score taken apart into what each part of the residual stream wrote, on
the query side and on the key side (QK composition: Elhage et al. 2021, Olsson et al. 2022).

The score of query i and key j is scale x q_i · k_j (+ a position bias outside q·k: ALiBi, T5's relative buckets,
DeBERTa's position terms). With every norm's scale frozen at the run's value (a LayerNorm's, an RMSNorm's, a
post-norm model's on the way, a query/key norm's), q_i and k_j are affine in the stream's parts
(model/inspect/qk_parts.py through model/inspect/qk_sides.py), so the score splits exactly:
- query_shares[part] = scale x (that part's q_i) · (the whole k_j): they add up, with the position bias, to the score;
- key_shares[part] = scale x (the whole q_i) · (that part's k_j): likewise;
- pairs[a, b] = scale x (a's q_i) · (b's k_j): every pair, adding up with the position bias to the score.
`bias` is a part of each side: the norms' biases on the way and the projection's. The score is the one the model's
attention computed (its own scale, before any soft-capping, the mask and the softmax: soft-capping, sinks and the
softmax act after it); a split whose sum differs from it by more than SUM_TOLERANCE is refused, never shown.
The tolerance is relative to the largest of the score's size, its parts' sizes summed and scale x |q_i| |k_j|: the
model's own float32 dot product rounds relative to that, so a score near 0 of large q and k is not refused for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.score_setup import setup_head

SUM_TOLERANCE = 1e-4  # relative to the larger of the score's size and its parts' sizes summed (16-bit: 4 epsilons)


@dataclass(frozen=True)
class ScoreParts:
    """One score of one head (`site`, `layer`, `head`) from query position `query` to key position `key` (indices of
    `query_tokens` and `key_tokens`: a self-attention's both the trace's tokens), taken apart."""

    site: str
    layer: int
    head: int
    query: int
    key: int
    query_tokens: list[str]
    key_tokens: list[str]
    query_parts: list[str]  # "embed", "pos_embed", "L0H1", "L0.attn_bias", "L0.mlp", …, "bias"
    key_parts: list[str]  # the same for the key's position (cross-attention: the encoder's, "encoder.L0H1")
    query_shares: np.ndarray  # (len(query_parts),) each part's q_i · the whole k_j x scale
    key_shares: np.ndarray  # (len(key_parts),) the whole q_i · each part's k_j x scale
    pairs: np.ndarray  # (len(query_parts), len(key_parts)) each query part's q_i · each key part's k_j x scale
    position_bias: float  # added outside q·k (0.0 where the model adds none)
    position_bias_name: str | None  # what it is ("ALiBi", …), None where the model adds none
    score: float  # the model's: scale x q_i · k_j + position_bias, before soft-capping, the mask and the softmax
    probability: float  # the attention weight of that cell (after the softmax)
    scale: float
    scale_text: str  # "1/√8"
    softcap: float | None  # the model caps the score to c tanh(score / c) after this (Gemma 2)

    def ranked(self, side: Literal["query", "key"]) -> list[tuple[str, float]]:
        """The side's parts as (name, share), the largest share by size first."""
        names, shares = (self.query_parts, self.query_shares) if side == "query" else (self.key_parts,
                                                                                      self.key_shares)
        return sorted(zip(names, shares.tolist(), strict=True), key=lambda pair: -abs(pair[1]))

    def as_dict(self) -> dict[str, Any]:
        """Every field, arrays as nested lists (JSON)."""
        return {name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in vars(self).items()}


@dataclass(frozen=True)
class PatternParts:
    """One whole row of a head's scores, from query position `query` to every key it may see (`keys`), each
    taken apart on both sides: column c of the shares is key keys[c]."""

    site: str
    layer: int
    head: int
    query: int
    query_tokens: list[str]
    key_tokens: list[str]
    keys: np.ndarray  # (n,) int: the key positions the mask lets the query see
    query_parts: list[str]
    key_parts: list[str]
    query_shares: np.ndarray  # (len(query_parts), n) each part's q_i · the whole k_j x scale
    key_shares: np.ndarray  # (len(key_parts), n) the whole q_i · each part's k_j x scale (its own position j)
    position_bias: np.ndarray  # (n,) 0 where the model adds none
    position_bias_name: str | None
    scores: np.ndarray  # (n,) the model's scores
    pattern: np.ndarray  # (n,) the attention weights
    scale: float
    scale_text: str
    softcap: float | None

    def as_dict(self) -> dict[str, Any]:
        """Every field, arrays as nested lists (JSON)."""
        return {name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in vars(self).items()}


def explain_score(runner: Runner, trace: Trace, site: str, layer: int, head: int, query: int,
                  key: int) -> ScoreParts:
    """The score of `head` at `site` and `layer` from `query` to `key` (positions; -1: the last), taken apart, from a
    trace recorded with `score_options` (model/inspect/score_setup.py). UserError for what cannot be split, or a
    split that does not add up to the model's score."""
    setup = setup_head(runner, trace, site, layer, head, query, [key])
    j = int(setup.keys[0])
    q_names, q_parts = setup.query_vectors()  # (Pq, d_head) each part's q_i, "bias" last
    k_names, k_parts = setup.key_vectors(j)  # (Pk, d_head)
    q_whole, k_whole = setup.q_whole[0], setup.k_whole[0]
    s = setup.weights.scale
    query_shares, key_shares, pairs = s * q_parts @ k_whole, s * k_parts @ q_whole, s * q_parts @ k_parts.T
    bias, recorded = float(setup.position_bias[0]), float(setup.recorded[0])
    size = np.array([s * np.linalg.norm(q_whole) * np.linalg.norm(k_whole)])
    for shares in (query_shares, key_shares, pairs.ravel()):
        refuse_wrong_sum(runner, shares[:, None], np.array([bias]), np.array([recorded]), size)
    return ScoreParts(site, setup.layer, head, setup.query, j, setup.query_tokens, setup.key_tokens, q_names,
                      k_names, query_shares, key_shares, pairs, bias, setup.position_bias_name, recorded,
                      float(setup.probabilities[0]), s, setup.weights.scale_text, setup.weights.softcap)


def explain_pattern(runner: Runner, trace: Trace, site: str, layer: int, head: int, query: int) -> PatternParts:
    """Every score of `head`'s row at `query` (the keys the mask lets it see) taken apart on both sides, from a trace
    recorded with `score_options`. UserError as `explain_score`."""
    setup = setup_head(runner, trace, site, layer, head, query, None)
    s = setup.weights.scale
    q_names, q_parts = setup.query_vectors()
    query_shares = s * q_parts @ setup.k_whole.T  # (Pq, n)
    k_names, key_shares = setup.key_shares(s * setup.q_whole[0])  # (Pk, n)
    size = s * np.linalg.norm(setup.q_whole[0]) * np.linalg.norm(setup.k_whole, axis=1)  # (n,)
    for shares in (query_shares, key_shares):
        refuse_wrong_sum(runner, shares, setup.position_bias, setup.recorded, size)
    return PatternParts(site, setup.layer, head, setup.query, setup.query_tokens, setup.key_tokens, setup.keys,
                        q_names, k_names, query_shares, key_shares, setup.position_bias, setup.position_bias_name,
                        setup.recorded, setup.probabilities, s, setup.weights.scale_text, setup.weights.softcap)


def refuse_wrong_sum(runner: Runner, shares: np.ndarray, bias: np.ndarray, recorded: np.ndarray,
                     product: np.ndarray) -> None:
    """UserError where shares (parts, n), summed with the position bias (n,), differ from the model's scores (n,) by
    more than SUM_TOLERANCE (16-bit: 4 epsilons of the dtype) of the largest of a score's size, its shares' and
    `product` (n,), scale x |q_i| |k_j|."""
    epsilon = float(torch.finfo(getattr(torch, runner.facts.precision)).eps)
    total = shares.sum(0) + bias
    size = np.maximum(np.maximum(np.abs(recorded), np.abs(shares).sum(0) + np.abs(bias)), product)
    wrong = ~(np.abs(total - recorded) <= max(SUM_TOLERANCE, 4 * epsilon) * np.maximum(size, 1e-6))  # NaN too
    if wrong.any():
        c = int(np.argmax(wrong))
        raise UserError(f"The parts add up to {total[c]:+.4f}, but the model's own score is {recorded[c]:+.4f}: "
                        "something on the way to this attention is not a part this split knows (a norm whose scale "
                        "was not recorded, a sum with a factor), so no split is shown rather than a wrong one.")

