"""What a mixture of experts' router scores its experts with, read from what it returns: its logits over every expert,
the weights it mixes the chosen experts' outputs by, and the experts it chose. Routers differ: Mixtral and Qwen-MoE
take a softmax over every expert and keep the top k (Mixtral renormalises them over the k, Qwen-MoE where
norm_topk_prob says); GPT-OSS keeps the top k logits and takes a softmax over those alone, which gives the same
weights as Mixtral's; DeepSeek-V3 takes a sigmoid of each logit, chooses by the sigmoid plus a correction bias, and
mixes by the sigmoids (renormalised, scaled). The function is the one whose values at the chosen experts the returned
weights are proportional to (or equal to, with one expert a token), so the scores recorded are the router's own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

ScoringName = Literal["softmax", "sigmoid", "logits"]
TOLERANCE = 1e-4  # relative: the weights are computed in float32 (bfloat16 routers: their logits cast up first)


@dataclass(frozen=True)
class Scoring:
    """A router's scoring function: its name, how a person reads its values, and the formula of the scores."""

    name: ScoringName
    value_name: str  # a figure's axis and colour bar
    words: str  # a sentence's subject: "its softmax probabilities"
    latex: str  # s = f(x W_router)
    apply: Callable[[torch.Tensor], torch.Tensor]  # (tokens, experts) logits -> scores


SCORINGS: dict[ScoringName, Scoring] = {
    "softmax": Scoring("softmax", "softmax probability", "its softmax probabilities over every expert",
                       r"p=\mathrm{softmax}(x\,W_{\mathrm{router}})", lambda logits: logits.softmax(-1)),
    "sigmoid": Scoring("sigmoid", "sigmoid score", "its sigmoid scores, one per expert (they need not add up to 1)",
                       r"s=\sigma(x\,W_{\mathrm{router}})", torch.sigmoid),
    "logits": Scoring("logits", "router logit", "its logits", r"s=x\,W_{\mathrm{router}}", lambda logits: logits),
}


def _proportional(weights: torch.Tensor, values: torch.Tensor) -> bool:
    """weights, values: (tokens, k), positive: each row of weights a multiple of the same row of values."""
    ratio = weights / values.clamp_min(1e-30)
    return bool(torch.allclose(ratio, ratio[:, :1].expand_as(ratio), rtol=TOLERANCE, atol=0.0))


def router_scoring(logits: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> Scoring:
    """logits (tokens, experts), weights and indices (tokens, k): what the router returned -> its scoring function.
    Softmax: the weights are its probabilities at the chosen experts, or (more than one expert a token) proportional
    to them (renormalised over the k: Mixtral, GPT-OSS); sigmoid: proportional to the sigmoids there (DeepSeek-V3);
    logits where the weights tell neither apart (one expert a token, renormalised to 1)."""
    logits, weights = logits.detach().float(), weights.detach().float()
    chosen = lambda scoring: SCORINGS[scoring].apply(logits).gather(-1, indices.long())  # noqa: E731  (tokens, k)
    if torch.allclose(weights, chosen("softmax"), rtol=TOLERANCE, atol=1e-7):
        return SCORINGS["softmax"]
    if indices.shape[-1] > 1 and bool((weights > 0).all()):
        for name in ("softmax", "sigmoid"):
            if _proportional(weights, chosen(name)):
                return SCORINGS[name]
    return SCORINGS["logits"]


def router_scores(routed: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """What a router returned (logits, weights, indices) -> its scores over every expert, (tokens, experts) float32,
    computed by its own scoring function (`router_scoring`)."""
    logits, weights, indices = routed[0], routed[-2], routed[-1]
    return router_scoring(logits, weights, indices).apply(logits.detach().float())


def scoring_of(scores: np.ndarray) -> Scoring:
    """The scoring function that made recorded scores (pos, experts) (`router_scores`): softmax, the only one whose
    rows add up to 1; sigmoid, values strictly between 0 and 1 that do not; logits, anything else."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size and ((scores >= 0) & (scores <= 1)).all() and np.allclose(scores.sum(-1), 1.0, atol=1e-4):
        return SCORINGS["softmax"]
    if scores.size and ((scores > 0) & (scores < 1)).all():
        return SCORINGS["sigmoid"]
    return SCORINGS["logits"]
