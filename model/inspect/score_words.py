"""One sentence said from a score taken apart (model/inspect/score_parts.py): which part most made a head attend where
it does ("L1H2 attends from 't' to 'y' mostly because of what L0H1 (a previous-token head) wrote at 'y': +6.1 of
14.7"), and for a whole row, which part most lifts its brightest key above the others. Heads are named by what their
statistics say they do, where that is clear (`head_words`)."""

from __future__ import annotations

import numpy as np

from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.model.inspect.score_parts import PatternParts, ScoreParts

PREVIOUS_TOKEN = 0.5  # a head whose queries give at least this share, on average, to the token before them: a
# previous-token head (the Overview's word too)
LEANS_PREVIOUS = 0.25  # a head that gives at least this share to the token before, and more than to itself or the
# first token: said to look at the previous token, with its share
FIRST_TOKEN = 0.8  # a head that gives at least this share to the first token: a sink head
SELF = 0.5  # a head that gives at least this share to the query's own token


def head_words(statistics: np.ndarray) -> dict[str, str]:
    """statistics (layers, heads, len(STATISTICS)), a site's summary: "L0H1" -> "a previous-token head" for the
    heads whose shares say so clearly (the others are left out)."""
    first, previous, itself = (statistics[..., STATISTICS.index(name)] for name in
                               ("to first token", "to previous token", "to itself"))
    words = {}
    for (layer, head), share in np.ndenumerate(np.nan_to_num(previous)):
        if share >= PREVIOUS_TOKEN:
            words[f"L{layer}H{head}"] = "a previous-token head"
        elif share >= LEANS_PREVIOUS and share > max(first[layer, head], itself[layer, head]):
            words[f"L{layer}H{head}"] = f"which looks at the previous token: {share:.0%} of its attention"
        elif first[layer, head] >= FIRST_TOKEN:
            words[f"L{layer}H{head}"] = "a sink head, most of its attention on the first token"
        elif itself[layer, head] >= SELF:
            words[f"L{layer}H{head}"] = "a head that attends to the token itself"
    return words


def part_words(part: str, roles: dict[str, str]) -> str:
    """How a sentence names a part: "L0H1 (a previous-token head)", "layer 2's MLP", "the token embeddings"."""
    name = part.removeprefix("encoder.")
    fixed = {"embed": "the token embeddings", "pos_embed": "the position embeddings",
             "bias": "the norms' and projections' biases"}
    if name in fixed:
        words = fixed[name]
    elif name.endswith(".mlp"):
        words = f"layer {name[1:].split('.')[0]}'s MLP"
    elif name.endswith(".attn_bias"):
        words = f"layer {name[1:].split('.')[0]}'s attention output bias"
    else:
        words = f"{name} ({roles[name]})" if name in roles else name
    return f"the encoder's {words}" if part.startswith("encoder.") else words


def score_sentence(parts: ScoreParts, roles: dict[str, str]) -> str:
    """Each side's part that gave the score most of its sign, the key side's first (it says why this key), each with
    its share of the score."""
    sign = 1.0 if parts.score >= 0 else -1.0
    key_part, key_share = max(zip(parts.key_parts, parts.key_shares.tolist(), strict=True), key=lambda p: sign * p[1])
    query_part, query_share = max(zip(parts.query_parts, parts.query_shares.tolist(), strict=True),
                                  key=lambda p: sign * p[1])
    query, key = parts.query_tokens[parts.query], parts.key_tokens[parts.key]
    return (f"L{parts.layer}H{parts.head} attends from ‘{query}’ (#{parts.query}) to ‘{key}’ (#{parts.key}) mostly "
            f"because of what {part_words(key_part, roles)} wrote at ‘{key}’: {key_share:+.3g} of {parts.score:.3g} "
            f"on the key side; on the query side, {part_words(query_part, roles)} wrote {query_share:+.3g} of it "
            f"at ‘{query}’.")


def row_sentence(parts: PatternParts, roles: dict[str, str]) -> str:
    """Which part of the key side most lifts the row's brightest key's score above the mean of the other keys'."""
    brightest = int(np.argmax(parts.pattern))
    key = int(parts.keys[brightest])
    head = f"L{parts.layer}H{parts.head}"
    query = parts.query_tokens[parts.query]
    opening = (f"From ‘{query}’ (#{parts.query}), {head} looks most at ‘{parts.key_tokens[key]}’ (#{key}, weight "
               f"{parts.pattern[brightest]:.2f})")
    if len(parts.keys) == 1:
        return opening + ", the only key it may see."
    others = np.delete(parts.key_shares, brightest, axis=1).mean(1)  # (parts,) the mean over the other keys
    lift = parts.key_shares[:, brightest] - others  # (parts,)
    top = int(np.argmax(lift))
    return (f"{opening}, most of all because of what {part_words(parts.key_parts[top], roles)} wrote there: "
            f"{lift[top]:+.3g} above its mean over the other keys.")
