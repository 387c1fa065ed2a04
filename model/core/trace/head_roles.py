"""Each attention head named by what it does, read from its site's summary (model/core/attention/summary.py: the
statistics and thumbnails made in the run's own pass, or by `summarise_site` from a trace): one rule a role, tried in
the order of ROLES, the first that holds names the head (docs/python.md, `Trace.head_roles`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.row_reduction import ROLE_FROM, STATISTICS, induction_targets
from attention_atlas.model.core.attention.summary import SiteSummary

ROLES = ("sink", "previous token", "induction", "self", "local", "vertical", "broad", "mixed")  # in priority order
SINK = 0.8  # a sink: at least this share of the later queries' attention (from ROLE_FROM) on the first token
PREVIOUS = 0.6  # a previous-token head: at least this share of the later queries' attention on the token before
INDUCTION = 0.5  # an induction head: at least this share, on average over the queries whose token occurred before,
MIN_TARGETS = 8  # on the token after its last occurrence, where at least this many queries have such a target
SELF = 0.6  # a self head: at least this share of every query's attention on itself
LOCAL_WINDOW = 8.0  # a local head: the mean distance of its attention off the first token at most this many tokens,
LOCAL_SHARE = 0.25  # and at most this share of the mean distance of a head spreading evenly over the keys each sees
VERTICAL_KEYS = 3  # a vertical head: this many key column blocks of its thumbnail, the first (the sink's) not among
VERTICAL = 0.5  # them, hold at least this share of the attention of each of the later half of its query row blocks
BROAD = 0.5  # a broad head: its queries' effective keys (2^entropy), geometric mean, at least this share of those seen
ROWS = 256  # a mask's query rows read at a time where its diagonals are not constant (key_spans)
MEASURES = ("to first token", "to previous token", "induction", "to itself", "distance off first token", "vertical",
            "spread")
ROLE_MEASURE = dict(zip(ROLES[:-1], MEASURES, strict=True))  # the measure each role's rule reads
_FIRST, _PREVIOUS, _INDUCTION = (STATISTICS.index(name) for name in (
    f"to first token (from query {ROLE_FROM})", f"to previous token (from query {ROLE_FROM})",
    "to token after its last occurrence"))


def site_roles(site: str, summary: SiteSummary, allowed: np.ndarray, ids: Sequence[int] | None) -> pd.DataFrame:
    """One row a head of the site's every layer: site, layer, head, role, the measure its role's rule read and its
    value ("" and NaN for mixed), then MEASURES (NaN where the site does not measure one: cross-attention's positions;
    the induction share of a text with fewer than MIN_TARGETS repeats).
    allowed: the site's (q_len, k_len) mask; ids: its queries' token ids (None: no induction share)."""
    stats = summary.statistics  # (layers, heads, len(STATISTICS))
    repeats = 0 if ids is None else int((induction_targets(ids) >= 0).sum())
    seen, even = key_spans(allowed)  # (q_len,) each
    entropy = stats[..., STATISTICS.index("entropy (bits)")]
    measures = {
        "to first token": stats[..., _FIRST],
        "to previous token": stats[..., _PREVIOUS],
        "induction": stats[..., _INDUCTION] if repeats >= MIN_TARGETS else np.full(entropy.shape, np.nan),
        "to itself": stats[..., STATISTICS.index("to itself")],
        "distance off first token": off_first_distance(summary, *allowed.shape),
        "vertical": vertical_shares(summary.thumbnails, *allowed.shape),
        "spread": np.exp2(entropy - np.log2(np.maximum(seen, 1)).mean()),
    }
    uniform = np.nanmean(even)  # the mean distance of a head spreading evenly over the keys each query sees
    with np.errstate(invalid="ignore"):  # NaN measures hold no rule
        rules = [measures["to first token"] >= SINK, measures["to previous token"] >= PREVIOUS,
                 measures["induction"] >= INDUCTION, measures["to itself"] >= SELF,
                 (measures["distance off first token"] <= np.minimum(LOCAL_WINDOW, LOCAL_SHARE * uniform)),
                 measures["vertical"] >= VERTICAL, measures["spread"] >= BROAD]
    roles = np.select(rules, ROLES[:-1], ROLES[-1]).reshape(-1)  # (layers x heads): the first rule that holds
    layers, heads = entropy.shape
    flat = np.stack([measures[name].reshape(-1) for name in MEASURES])  # (measures, layers x heads)
    read = np.array([MEASURES.index(ROLE_MEASURE[role]) if role in ROLE_MEASURE else -1 for role in roles])
    table = pd.DataFrame({"site": site, "layer": np.repeat(np.arange(layers), heads),
                          "head": np.tile(np.arange(heads), layers), "role": roles,
                          "measure": [MEASURES[i] if i >= 0 else "" for i in read],
                          "value": np.where(read >= 0, flat[read, np.arange(len(roles))], np.nan)})
    return table.assign(**{name: values.reshape(-1) for name, values in measures.items()})


def off_first_distance(summary: SiteSummary, q_len: int, k_len: int) -> np.ndarray:
    """(layers, heads): the mean distance of the attention off the first token, |i - k| over the keys k > 0 weighted
    by that attention's share, from the summary's mean distance less the first token's part (NaN: not measured)."""
    stats = summary.statistics
    off_share = summary.row_sums(q_len, k_len) - stats[..., STATISTICS.index("to first token")]  # (layers, heads)
    with np.errstate(invalid="ignore", divide="ignore"):
        return stats[..., STATISTICS.index("mean distance off the first token")] / off_share


def vertical_shares(thumbnails: np.ndarray, q_len: int, k_len: int) -> np.ndarray:
    """(layers, heads): from thumbnails (layers, heads, t_q, t_k) of block means, the least share of a query row
    block's attention, over the later half of the row blocks, on the head's VERTICAL_KEYS key column blocks that
    take most of those rows' attention, the first column block left out (an approximation: a block holds
    k_len / t_k keys)."""
    t_q, t_k = thumbnails.shape[-2:]
    widths = np.diff(block_starts(k_len, t_k))  # (t_k,) keys a column block
    shares = thumbnails[..., t_q // 2 :, 1:].astype(np.float64) * widths[1:]  # (layers, heads, rows, t_k - 1)
    if shares.shape[-1] == 0:
        return np.full(thumbnails.shape[:2], np.nan)
    top = np.argsort(shares.sum(-2), -1)[..., -VERTICAL_KEYS:]  # (layers, heads, k): the most attended blocks
    chosen = np.take_along_axis(shares, top[..., None, :], -1).sum(-1)  # (layers, heads, rows)
    return chosen.min(-1)


def key_spans(allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q_len,) the keys each query sees, and their mean distance from it (NaN where it sees none). A mask whose
    diagonals are constant (causal, bidirectional, a sliding window) is read by its diagonals' running sums, O(q + k);
    any other a block of rows at a time."""
    q_len, k_len = allowed.shape
    if k_len > 1 and constant_diagonals(allowed):
        diagonals = np.concatenate([allowed[0, ::-1], allowed[1:, 0]])  # by i - k, from -(k_len - 1) to q_len - 1
        distance = np.abs(np.arange(-(k_len - 1), q_len)) * diagonals
        counts, sums = (np.concatenate([[0], np.cumsum(a, dtype=np.int64)]) for a in (diagonals, distance))
        rows = np.arange(q_len)  # row i reads the diagonals i - k_len + 1 .. i: positions i .. i + k_len - 1
        seen, total = counts[rows + k_len] - counts[rows], sums[rows + k_len] - sums[rows]
    else:
        seen, total = np.zeros(q_len, np.int64), np.zeros(q_len, np.int64)
        keys = np.arange(k_len)
        for start in range(0, q_len, ROWS):
            block = np.asarray(allowed[start : start + ROWS])  # (rows, k_len)
            rows = np.arange(start, start + len(block))
            seen[rows] = block.sum(1)
            total[rows] = (block * np.abs(rows[:, None] - keys)).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return seen, total / seen


def constant_diagonals(allowed: np.ndarray) -> bool:
    """Whether query i seeing key k depends on i - k alone: an array whose strides make it so (row i + 1 starts where
    row i does, one key on: a trace's kept causal or full mask, model/core/trace/kept_masks.py), or one whose rows
    equal the row before shifted by one key, compared ROWS rows at a time (no (q_len, k_len) temporary)."""
    if allowed.strides[0] == -allowed.strides[1]:
        return True
    q_len = len(allowed)
    starts = range(0, q_len - 1, ROWS)
    return all(np.array_equal(allowed[start + 1 : min(start + ROWS + 1, q_len), 1:],
                              allowed[start : min(start + ROWS, q_len - 1), :-1]) for start in starts)
