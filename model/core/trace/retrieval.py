"""Each head's retrieval score (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality") on a
text that says a span of itself twice.

Wu et al. score a head while a model writes out a needle it read: a written token w is copied by the head when w is
in the needle and the key the head attends to most (top 1) is a position of the needle holding w; the score is the
share of the needle's tokens so copied. Here the text itself is the needle and its repeat the writing: the longest
span of token ids said twice, the second time after the first has ended (`repeated_span`), its first MAX_SPAN tokens
at most. Each query of the repeat (but its last) is a step whose written token is the next one in the text, which the
needle holds; the head copies it when its most attended key lies in the needle and holds that token. The score: the
copied share of those steps (1: every token of the repeat copied). Where the text repeats no span of MIN_SPAN tokens,
NaN.

The summary the run makes holds no row's most attended key, so the score reads the repeat's query rows themselves:
computed from the trace's kept queries and keys, a block of rows at a time (`Trace.pattern_rows`), no second pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.trace.sites import Site

MIN_SPAN = 16  # tokens a repeated span has at least (a shorter one is a phrase, or digits that happen to recur)
MAX_SPAN = 1024  # the repeat's first tokens read at most (its rows: 1,024 of 32,768 keys a head, about a second)
ROWS = 64  # query rows read at a time (a block of 32,768 keys and 9 heads: 75 MB)
_BASE = np.uint64(0x9E3779B97F4A7C15)  # the rolling hash's multiplier (odd; arithmetic wraps at 2^64)


@dataclass(frozen=True)
class Repeat:
    """A span of token ids said twice: positions first.. and second.. hold the same `length` ids, first + length <=
    second."""

    first: int
    second: int
    length: int

    def steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(queries, written): the repeat's query positions but its last, at most MAX_SPAN - 1, and the position of
        the needle holding the token each writes next (the text's next token)."""
        count = min(self.length, MAX_SPAN) - 1
        return self.second + np.arange(count), self.first + 1 + np.arange(count)


def repeated_span(ids: Sequence[int]) -> Repeat | None:
    """The longest span of `ids` said twice without overlapping itself, at least MIN_SPAN long (the first such pair
    of places where several are as long); None where there is none. A binary search on the length, each length's
    spans compared by a rolling hash of their ids (a match confirmed id by id): O(n log n)."""
    id_array = np.asarray(ids, dtype=np.int64)
    low, high, found = MIN_SPAN, len(id_array) // 2, None
    while low <= high:
        length = (low + high) // 2
        pair = _twice(id_array, length)
        if pair is None:
            high = length - 1
        else:
            found, low = Repeat(pair[0], pair[1], length), length + 1
    return found


def _twice(ids: np.ndarray, length: int) -> tuple[int, int] | None:
    """(first, second): the earliest place a span of `length` ids starts that recurs from `length` positions on or
    later, and the last place it recurs; None where no span does."""
    with np.errstate(over="ignore"):
        powers = _BASE ** np.arange(len(ids) + 1, dtype=np.uint64)
        terms = ids.astype(np.uint64) * powers[:-1]  # ids[t] B^t
        prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        # span i's ids x B^i.., times B^(n - i): every span's as if it started at n, so equal spans hash equal
        spans = (prefix[length:] - prefix[:-length]) * powers[::-1][: len(ids) - length + 1]  # (n - length + 1,)
    order = np.argsort(spans, kind="stable")  # places of equal hashes together, each group in position order
    starts = np.flatnonzero(np.r_[True, spans[order][1:] != spans[order][:-1]])
    ends = np.r_[starts[1:], len(order)] - 1
    firsts, lasts = order[starts], order[ends]
    for first, last in sorted(zip(firsts[lasts - firsts >= length], lasts[lasts - firsts >= length], strict=True)):
        if np.array_equal(ids[first : first + length], ids[last : last + length]):
            return int(first), int(last)
    return None


def retrieval_scores(ids: Sequence[int], layers: int, heads: int,
                     rows_of: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
    """(layers, heads) float64: each head's retrieval score on the text of `ids` (module docstring); NaN where the text
    repeats no span. rows_of(layer, query rows) -> (heads, rows, k_len) that layer's attention on those rows."""
    repeat = repeated_span(ids)
    if repeat is None:
        return np.full((layers, heads), np.nan)
    queries, written = repeat.steps()
    id_array = np.asarray(ids)
    copied = np.zeros((layers, heads), np.int64)
    for layer in range(layers):
        for start in range(0, len(queries), ROWS):
            rows = queries[start : start + ROWS]
            top = np.asarray(rows_of(layer, rows)).argmax(-1)  # (heads, rows): each row's most attended key
            in_needle = (top >= repeat.first) & (top < repeat.first + repeat.length)
            copied[layer] += (in_needle & (id_array[top] == id_array[written[start : start + ROWS]])).sum(-1)
    return copied / len(queries)


class Traced(Protocol):
    """What `site_retrieval` reads of a Trace (model/core/trace/trace.py, which imports this module)."""

    def shape(self, name: str) -> tuple[int, ...]: ...
    def pattern_name(self, site: str, layer: int) -> str: ...
    def n_layers(self, site: str) -> int: ...
    def pattern_source(self, site: str, layer: int) -> PatternSource | None: ...
    def pattern(self, site: str, layer: int) -> np.ndarray: ...
    def query_ids(self, site: str) -> list[int]: ...


def site_retrieval(trace: Traced, site: str) -> np.ndarray:
    """(layers, heads) float64: each head of a site's retrieval score on the trace's text (`retrieval_scores`), read
    from the trace's kept queries and keys (or its whole patterns); NaN for cross-attention (its keys are another
    text)."""
    heads = trace.shape(trace.pattern_name(site, 0))[0]
    if Site.of(site).is_cross:
        return np.full((trace.n_layers(site), heads), np.nan)

    def rows_of(layer: int, rows: np.ndarray) -> np.ndarray:
        source = trace.pattern_source(site, layer)
        return trace.pattern(site, layer)[:, rows] if source is None else source.pattern(rows=rows, dtype=np.float32)

    return retrieval_scores(trace.query_ids(site), trace.n_layers(site), heads, rows_of)
