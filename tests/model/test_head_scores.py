"""One head of a long text from its scores and the run's row normalisers (model/inspect/head_scores.py), held to the
same views from its probabilities (model/inspect/long_head.py's other way): the max-pooled blocks, the weights by
distance back and the sink columns' means; and the normalisers both ways a block is reduced, held to log2 of each
row's sum of 2^scores computed here in float64."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect import long_head
from attention_atlas.model.inspect.head_scores import scored_overview
from attention_atlas.model.inspect.long_head import SINK_SHARE, head_overview, sink_columns
from tests import tiny_hf

SITE = "decoder.attn"
TEXT = "the quick brown fox jumps over the lazy dog " * 40  # 361 tokens with <s>


@pytest.fixture(scope="module", params=["causal", "padded", "sliding window"])
def trace(request, tmp_path_factory):
    """A tiny random Llama of sharp heads (weights 15 times the usual spread), run as the app runs it: under its
    causal mask (kept as its diagonals: the masked keys found from the offsets), with 20 padding keys (the mask's
    rows read), or a Mistral's window of 3 (keys hidden before each query's window too)."""
    folder = tmp_path_factory.mktemp("scores") / request.param.replace(" ", "-")
    sharp = {"max_position_embeddings": 512, "initializer_range": 0.3}
    if request.param == "sliding window":
        tiny_hf.build_type("mistral", folder, **sharp)
    else:
        tiny_hf.build("llama", folder, **sharp)
    padding = len(TEXT.split()) + 21 if request.param == "padded" else 0  # <s>, the words, 20 pads
    options = RunOptions(hooks=("*.hook_pattern",), summarised=True, pad_to=padding)
    return load_hf_runner(str(folder)).run(TEXT, options=options)


def test_normalisers_are_log2_of_each_rows_sum(trace, reduction) -> None:
    from attention_atlas.model.core.trace.summaries import summarise_site

    normalisers = summarise_site(trace, SITE).normalisers  # (layers, heads, q_len), made the `reduction` way
    for layer in range(trace.n_layers(SITE)):
        source = trace.pattern_source(SITE, layer)
        query, key = source.query.astype(np.float64), source.key.astype(np.float64)
        group = len(query) // len(key)
        bits = np.einsum("hqd,hkd->hqk", query, np.repeat(key, group, 0)) * source.scale / np.log(2)
        bits = np.where(np.asarray(source.allowed), bits, -np.inf)
        top = bits.max(-1)
        expected = top + np.log2(np.exp2(bits - top[..., None]).sum(-1))
        np.testing.assert_allclose(normalisers[layer], expected, atol=2e-5)


def test_the_views_from_scores_equal_those_from_probabilities(trace, monkeypatch) -> None:
    """Each head's float32 probabilities, whole: the largest of each block of cells, p[i, i - d], and the sinks'
    column means (keys that 5% of the attention goes to, here), against the views from the scores."""
    monkeypatch.setattr(long_head, "POOLED", 64)  # blocks of 5 or 6 rows and keys: a max over many cells
    monkeypatch.setattr(long_head, "SINK_SHARE", 0.05)  # a random model's sinks are faint
    summary = trace.summaries[SITE]
    n = len(trace.tokens)
    starts = long_head.block_starts(n, 64)
    i, d = np.arange(n)[:, None], np.arange(long_head.REACH + 1)[None, :]
    sinks_seen = 0
    for layer in range(trace.n_layers(SITE)):
        source = trace.pattern_source(SITE, layer)
        for head in range(trace.facts.n_heads):
            assert scored_overview(source, summary, layer, head, starts, starts, 8, True, SINK_SHARE) is not None
            view = head_overview(trace, SITE, layer, head)  # the scores' way
            p = source.pattern(heads=[head], dtype=np.float32)[0]  # (n, n)
            pooled = np.array([[p[a:b, c:e].max() for c, e in pairwise(starts)] for a, b in pairwise(starts)])
            np.testing.assert_allclose(view.pooled, pooled, atol=2e-6)
            behind = np.where(i - d >= 0, p[i, np.maximum(i - d, 0)], np.nan)
            np.testing.assert_allclose(view.by_distance, behind, atol=2e-6)  # NaN where there is no key
            means = p.mean(0)
            sinks = sink_columns(means)
            np.testing.assert_array_equal(sink_columns(view.column_means), sinks)
            np.testing.assert_allclose(view.column_means[sinks], means[sinks], atol=1e-6)
            sinks_seen += len(sinks)
    windowed = trace.facts.model_id.endswith("sliding-window")  # (a window of 3 keys leaves no key a sink)
    assert sinks_seen or windowed  # some head has a sink to find
