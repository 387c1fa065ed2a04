"""Why a head attends where it does, drawn: a score taken apart (`Model.explain_score`) or a whole row
(`Model.explain_pattern`), as the "Why here?" section of the Attention page and Step through draws it:

    import attention_atlas as aa
    model = aa.load("toy-induction")
    e = model.explain_score("a b c d a b c d", layer=1, head=2, query=-1, key=5)
    aa.plot.explain(e)               # each side's largest parts
    aa.plot.explain(e, pairs=True)   # the query side's parts x the key side's
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.inspect.score_parts import PatternParts, ScoreParts
from attention_atlas.viz.score_parts import largest, pairs_figure, row_figure, sides_figure
from attention_atlas.viz.tokens import position_label

TOP = 10  # parts drawn a side
PAIRS_TOP = 8  # parts a side of the pairs matrix


def score_title(parts: ScoreParts) -> str:
    """ "L1H2 · from #5 ‘t’ to #2 ‘y’: score 14.7, weight 0.83"."""
    return (f"L{parts.layer}H{parts.head} · from {position_label(parts.query, parts.query_tokens[parts.query])} "
            f"to {position_label(parts.key, parts.key_tokens[parts.key])}: score {parts.score:.4g} "
            f"(weight {parts.probability:.3f})")


def sides_bars(parts: ScoreParts, top: int = TOP) -> go.Figure:
    """Each side's `top` largest parts as bars."""
    return sides_figure((parts.query_parts, parts.query_shares), (parts.key_parts, parts.key_shares), parts.score,
                        score_title(parts), top)


def pairs_matrix(parts: ScoreParts, top: int = PAIRS_TOP) -> go.Figure:
    """The pairs of each side's `top` largest parts (every other pair left out)."""
    rows = np.argsort(-np.abs(parts.query_shares), kind="stable")[:top]
    cols = np.argsort(-np.abs(parts.key_shares), kind="stable")[:top]
    return pairs_figure([parts.query_parts[i] for i in rows], [parts.key_parts[j] for j in cols],
                        parts.pairs[np.ix_(rows, cols)], f"{score_title(parts)} · the largest parts' pairs")


def row_matrix(parts: PatternParts, top: int = TOP) -> go.Figure:
    """The key side of a whole row: the `top` parts that move some key's score most, over every key."""
    reach = np.abs(parts.key_shares).max(1)  # (parts,)
    names, _ = largest(parts.key_parts, reach, top)
    chosen = [parts.key_parts.index(name) for name in names]
    title = (f"L{parts.layer}H{parts.head} · the row of {position_label(parts.query, parts.query_tokens[parts.query])}"
             ": what each part wrote at each key")
    return row_figure(names, [parts.key_tokens[k] for k in parts.keys.tolist()], parts.keys,
                      parts.key_shares[chosen], parts.pattern, title)


def explain(parts: ScoreParts | PatternParts, *, pairs: bool = False, top: int = TOP) -> go.Figure:
    """A score taken apart (`Model.explain_score`): each side's `top` largest parts as bars, or (pairs=True) the
    query side's largest parts x the key side's; a whole row (`Model.explain_pattern`): its key side, the `top`
    parts that move some key's score most, under the row's weights."""
    if isinstance(parts, PatternParts):
        if pairs:
            raise UserError("pairs=True draws one score's pairs: explain a single score with model.explain_score")
        return row_matrix(parts, top)
    if not isinstance(parts, ScoreParts):
        raise UserError(f"explain draws what model.explain_score or model.explain_pattern returns, not a "
                        f"{type(parts).__name__}")
    return pairs_matrix(parts, min(top, PAIRS_TOP)) if pairs else sides_bars(parts, top)
