"""Teacher forcing: how a model scores a target a person gives, one token at a time.

Every runner reports a given target the same way, as arrays in `Trace.outputs` (keys below), so
the page that draws them does not depend on the model kind. Position i holds the i-th target
token, the model's distribution before it is read (the prefix: prompt + target[:i]).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

FORCED_KEYS = ("forced_tokens", "forced_probs", "forced_ranks", "forced_choice_tokens", "forced_choice_probs")


def score_target(
    log_probs: torch.Tensor, target_ids: Sequence[int], token_strings: Callable[[list[int]], list[str]]
) -> dict[str, np.ndarray]:
    """log_probs: (n, vocab), row i the distribution that should produce target_ids[i].

    -> forced_tokens (n,) the target's tokens; forced_probs (n,) the probability the model gave each;
    forced_ranks (n,) its rank among all tokens (1 = the model's own choice); forced_choice_tokens and
    forced_choice_probs (n,): what the model would have chosen instead."""
    scores = log_probs.float()  # (n, vocab)
    target = torch.as_tensor(list(target_ids), dtype=torch.long, device=scores.device)  # (n,)
    if scores.size(0) != target.numel():
        raise ValueError(f"{scores.size(0)} score rows for {target.numel()} target tokens")
    target_scores = scores.gather(1, target[:, None])  # (n, 1)
    ranks = 1 + (scores > target_scores).sum(-1)  # (n,) ties count in the target's favour
    choice = scores.argmax(-1)  # (n,)
    probs = scores.softmax(-1)  # (n, vocab); the rows may be logits or log-probabilities
    return {
        "forced_tokens": np.array(token_strings(target.tolist()), dtype=str),
        "forced_probs": probs.gather(1, target[:, None])[:, 0].cpu().numpy(),
        "forced_ranks": ranks.cpu().numpy(),
        "forced_choice_tokens": np.array(token_strings(choice.tolist()), dtype=str),
        "forced_choice_probs": probs.gather(1, choice[:, None])[:, 0].cpu().numpy(),
    }
