"""Each head's retrieval score (Wu et al. 2024; model/core/trace/retrieval.py) in the head table, held to scores
computed here from the whole patterns: SmolLM2 on 300 random words said twice; heads made by hand to copy, to look at
the needle's wrong token, or at the first token; and the repeated span against a search of every pair of places."""

from __future__ import annotations

import random

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.retrieval import MIN_SPAN, Repeat, repeated_span, retrieval_scores
from attention_atlas.model.registry import load_runner
from tests.model.test_head_roles import random_words_twice

SITE = "decoder.attn"


@pytest.mark.slow
def test_smollm2s_retrieval_scores_on_300_random_words_said_twice() -> None:
    """The second half's query i (but its last) writes the token at i + 1, which the first half holds at i - 299: a
    head copies it when its most attended key is a first-half position holding that token. Its score: the share of
    the 299 steps it copies, from each layer's whole float32 pattern."""
    runner = load_runner("smollm2")
    trace = runner.run(random_words_twice(runner), options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    ids = np.asarray(trace.ids)
    assert len(ids) == 600 and (ids[:300] == ids[300:]).all()
    assert repeated_span(ids) == Repeat(0, 300, 300)
    steps = np.arange(300, 599)
    expected = []
    for layer in range(trace.n_layers(SITE)):
        top = trace.pattern_source(SITE, layer).pattern(dtype=np.float32)[:, steps].argmax(-1)  # (heads, 299)
        expected.append(((top < 300) & (ids[top] == ids[steps + 1])).mean(-1))
    expected = np.stack(expected)  # (layers, heads)
    table = trace.head_roles()
    measured = table.pivot(index="layer", columns="head", values="retrieval").to_numpy()
    np.testing.assert_allclose(measured, expected, atol=1 / 299 + 1e-9)  # a near tie may fall either way
    assert (expected >= 0.5).sum() >= 1 and (expected < 0.1).mean() > 0.5  # some heads copy, most do not


def test_heads_made_to_copy_score_1_and_others_0() -> None:
    """40 ids, the 16 from 4 said again from 24: head 0 looks from each repeat query at the needle's copy of the next
    token (1), head 1 at the needle's copy of the query's own token (0: it does not hold the token written), head 2
    at the first token (0), head 3 copies the first half of the steps only (7 of 15)."""
    ids = list(range(100, 124)) + list(range(104, 120))
    assert repeated_span(ids) == Repeat(4, 24, 16)
    n = len(ids)
    patterns = np.full((4, n, n), 1e-3)
    for i in range(24, 39):
        copy = i - 20  # the needle's position holding ids[i]
        patterns[0, i, copy + 1] = patterns[3, i, copy + 1 if i < 31 else 0] = 1
        patterns[1, i, copy] = 1
        patterns[2, i, 0] = 1
    scores = retrieval_scores(ids, 1, 4, lambda layer, rows: patterns[:, rows])
    np.testing.assert_allclose(scores, [[1, 0, 0, 7 / 15]])


def test_no_repeat_gives_nan() -> None:
    ids = list(range(60)) + list(range(MIN_SPAN - 1))  # a repeat one token too short
    assert repeated_span(ids) is None
    assert np.isnan(retrieval_scores(ids, 2, 3, lambda layer, rows: np.zeros((3, len(rows), len(ids))))).all()


def test_the_repeated_span_is_the_longest_pair_that_does_not_overlap() -> None:
    """Against every pair of places, on short random texts of 2 or 50 ids (with and without a span copied in)."""
    rng = random.Random(1)
    for trial in range(150):
        n = rng.randint(34, 80)
        ids = [rng.randrange(2 if trial % 2 else 50) for _ in range(n)]
        if trial % 3 == 0:
            k = rng.randint(MIN_SPAN, n // 2)
            a = rng.randrange(0, n - 2 * k + 1)
            b = rng.randrange(a + k, n - k + 1)
            ids[b : b + k] = ids[a : a + k]
        longest = next((length for length in range(n // 2, MIN_SPAN - 1, -1)
                        if any(ids[p : p + length] == ids[q : q + length]
                               for p in range(n - length + 1) for q in range(p + length, n - length + 1))), None)
        found = repeated_span(ids)
        assert (found is None) == (longest is None)
        if found is not None:
            assert found.length == longest and found.first + found.length <= found.second
            assert ids[found.first : found.first + found.length] == ids[found.second : found.second + found.length]
