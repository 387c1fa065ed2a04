"""Per-head scores on a task's probe example: how much of a head's attention goes where a known mechanism puts it.

Each score is the mean, over the query positions it is defined at, of the attention weight on one key position:
- induction (a decoder-only model reading n distinct letters, then the same n letters; <s> at 0): from each
  position q = n+1…2n of the second half to q − n + 1, the token after the current token's copy in the first half
  (Olsson et al. 2022; above 0.4 is the threshold commonly used to call a head an induction head);
- previous token: from each position q ≥ 1 to q − 1;
- first token: from each position to position 0 (a head with nothing to do rests there);
- alignment (encoder-decoder cross-attention): from each output position to the source character the output
  token is read from (copy: the diagonal, reverse: the anti-diagonal, sort: where the letter stands).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attention_atlas.model.toy.tasks import Task


@dataclass(frozen=True)
class Score:
    """One score of every head of one attention site."""

    name: str  # e.g. "induction"
    site: str  # e.g. "decoder.attn"
    queries: np.ndarray  # (n,) query positions it averages over
    keys: np.ndarray  # (n,) the key position each query should attend to

    def of(self, patterns: np.ndarray) -> np.ndarray:
        """patterns (layers, heads, q_len, k_len) -> (layers, heads) mean weight on the expected keys."""
        return patterns[:, :, self.queries, self.keys].mean(axis=-1)


def alignment_name(positions: list[int]) -> str:
    """What an alignment looks like drawn: the diagonal, the anti-diagonal or another order."""
    if positions == sorted(positions):
        return "diagonal"
    if positions == sorted(positions, reverse=True):
        return "anti-diagonal"
    return "alignment"


def probe_scores(task: Task, lengths: dict[str, tuple[int, int]]) -> list[Score]:
    """The scores defined for `task`'s probe example; lengths: site -> (q_len, k_len) of its patterns there."""
    source, target = task.probe
    scores = []
    for site, (q_len, _) in lengths.items():
        if site == "decoder.cross_attn":
            if task.source_positions is not None:
                keys = np.array(task.source_positions(source))  # decoder position t reads <s> + target[:t]
                scores.append(Score(alignment_name(list(keys)), site, np.arange(len(keys)), keys))
            continue
        if task.kind == "decoder" and site == "decoder.attn" and source == target and not task.separator:
            n = len(source)
            queries = np.arange(n + 1, 2 * n + 1)
            scores.append(Score("induction", site, queries, queries - n + 1))
        scores.append(Score("previous token", site, np.arange(1, q_len), np.arange(q_len - 1)))
        scores.append(Score("first token", site, np.arange(q_len), np.zeros(q_len, dtype=int)))
    return scores
