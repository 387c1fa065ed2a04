"""A site's attention reduced in one pass of row blocks (model/core/attention/summary.py) equals the same numbers
computed from whole patterns: statistics, thumbnails, rollout (exact up to ROLLOUT_SIZE, block means beyond)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native, scratch, source
from attention_atlas.model.core.attention.row_reduction import ROLE_FROM, STATISTICS, induction_targets, row_distances
from attention_atlas.model.core.attention.summary import SiteSummary, summarise
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.hf import heads
from attention_atlas.model.registry import load_runner
from attention_atlas.viz.thumbnails import resample


def blocks_of(pattern: np.ndarray, rows: int = 3):
    """A (heads, q, k) pattern as summarise reads it, `rows` query rows at a time."""
    for start in range(0, pattern.shape[1], rows):
        block = pattern[:, start : start + rows].astype(np.float32)
        yield np.arange(start, start + block.shape[1]), torch.from_numpy(block)


def summarised(layers: list[np.ndarray], size: int = 4, self_attention: bool = True) -> SiteSummary:
    return summarise((blocks_of(p) for p in layers), layers[0].shape, size, self_attention)


def reference_statistics(p: np.ndarray, one_sequence: bool, ids: list[int] | None = None) -> np.ndarray:
    """(heads, len(STATISTICS)) from a whole (heads, q, k) pattern, float64; the induction share from the queries'
    token `ids` (NaN without)."""
    p = p.astype(np.float64)
    _, q, _k = p.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log2(p), 0.0).sum(-1).mean(-1)
    nan = np.full(len(p), np.nan)
    start = min(ROLE_FROM, q // 2)  # the later queries'
    if not one_sequence:
        return np.stack([entropy, nan, p[:, :, 0].mean(-1), nan, nan, p[:, start:, 0].mean(-1), nan, nan, nan], 1)
    i, later = np.arange(q), np.arange(max(start, 1), q)
    targets = induction_targets(ids) if ids is not None else np.full(q, -1)
    rows = np.flatnonzero(targets >= 0)
    induction = p[:, rows, targets[rows]].mean(-1) if len(rows) else nan
    weighted = p * np.abs(i[:, None] - np.arange(p.shape[2])[None, :])  # (heads, q, k): p |i - k|
    return np.stack([entropy, weighted.sum(-1).mean(-1), p[:, :, 0].mean(-1), p[:, i[1:], i[1:] - 1].mean(-1),
                     p[:, i, i].mean(-1), p[:, start:, 0].mean(-1), p[:, later, later - 1].mean(-1), induction,
                     weighted[..., 1:].sum(-1).mean(-1)], 1)


def assert_statistics(got: np.ndarray, expected: np.ndarray) -> None:
    """(heads, len(STATISTICS)) each: equal to 1e-4 (relative) or 1e-6; the distance off the first token, a difference
    of float32 distances (whose error a sink head's small difference keeps), to 1e-6 of the mean distance."""
    scale = np.ones_like(expected)
    scale[:, -1] = np.nan_to_num(expected[:, STATISTICS.index("mean distance")]) + 1
    np.testing.assert_allclose(got / scale, expected / scale, rtol=1e-4, atol=1e-6)


def reference_rollout(layers: list[np.ndarray]) -> np.ndarray:
    rolled = None
    for p in layers:
        a = 0.5 * p.astype(np.float64).mean(0) + 0.5 * np.eye(p.shape[-1])
        a /= a.sum(-1, keepdims=True)
        rolled = a if rolled is None else a @ rolled
    assert rolled is not None, "no layers to roll out"
    return rolled


def test_statistics_of_known_heads() -> None:
    n = 4
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1.0
    heads = np.stack([np.eye(n), previous, np.full((n, n), 1 / n)])  # (3, n, n)
    stats = summarised([heads]).statistics[0]  # (heads, len(STATISTICS))
    assert stats[0, :5].tolist() == pytest.approx([0.0, 0.0, 0.25, 0.0, 1.0])
    assert stats[1, 5:7].tolist() == [0.0, 1.0] and np.isnan(stats[:, 7]).all()  # from query 2 (half of 4); no ids
    assert stats[1, STATISTICS.index("to previous token")] == 1.0
    assert stats[1, STATISTICS.index("mean distance")] == pytest.approx(0.75)  # 0 for the first query, 1 for the rest
    assert stats[2, STATISTICS.index("entropy (bits)")] == pytest.approx(2.0)
    cross = summarised([np.full((1, 3, 5), 0.2)], self_attention=False)
    assert np.isnan(cross.statistics[0, 0, 1]) and cross.statistics[0, 0, 2] == pytest.approx(0.2)
    assert cross.rollout is None


def test_rollout_of_known_layers() -> None:
    n = 3
    assert np.allclose(summarised([np.eye(n)[None]] * 4).rollout, np.eye(n))
    uniform = np.full((2, n, n), 1 / n)
    assert np.allclose(summarised([uniform]).rollout, 0.5 * np.full((n, n), 1 / n) + 0.5 * np.eye(n))
    assert np.allclose(summarised([uniform, uniform]).rollout.sum(-1), 1.0)


@pytest.fixture(scope="module")
def smollm2_trace():
    runner = load_runner("smollm2")
    text = "The quick brown fox jumps over the lazy dog. " * 30  # about 300 tokens: two or three row blocks
    return runner.run(text, options=RunOptions(hooks=("*.hook_pattern",)))


def test_a_kept_source_reduces_to_the_numbers_of_its_whole_patterns(smollm2_trace, monkeypatch, reduction) -> None:
    monkeypatch.setattr("attention_atlas.model.core.trace.trace.ROW_BLOCK", 256)
    monkeypatch.setattr("attention_atlas.model.core.attention.source.ROW_BLOCK", 256)
    trace, site = smollm2_trace, "decoder.attn"
    layers = [whole(trace, site, layer) for layer in range(trace.n_layers(site))]
    got = summarise_site(trace, site, size=32)
    for layer, pattern in enumerate(layers):
        assert_statistics(got.statistics[layer], reference_statistics(pattern, True, trace.ids))
        np.testing.assert_allclose(got.thumbnails[layer], np.stack([resample(h, 32) for h in pattern]), atol=1e-6)
    assert got.rollout_is_exact
    np.testing.assert_allclose(got.rollout, reference_rollout(layers), atol=1e-6)
    n = len(trace.tokens)  # causal: each layer's rollout factor kept as its lower triangle, half the bytes
    assert got.layer_flows is not None and all(flow.shape == (n * (n + 1) // 2,) for flow in got.layer_flows)


def test_a_full_masks_rollout_factors_are_kept_whole() -> None:
    """Bidirectional attention's factors have numbers above the diagonal: kept as (b, b) matrices."""
    runner = load_runner("minilm")
    trace = runner.run("The cat sat on the mat.", options=RunOptions(hooks=("*.hook_pattern",)))
    got = summarise_site(trace, "encoder.attn", size=8)
    n = len(trace.tokens)
    assert got.layer_flows is not None and all(flow.shape == (n, n) for flow in got.layer_flows)
    layers = [whole(trace, "encoder.attn", layer) for layer in range(trace.n_layers("encoder.attn"))]
    np.testing.assert_allclose(got.rollout, reference_rollout(layers), atol=1e-6)


def test_rollout_of_a_long_text_is_block_means_of_the_exact_one(smollm2_trace, monkeypatch) -> None:
    """Cut into blocks (here 75 of 4 positions), the rollout approximates the exact one's block means."""
    trace, site = smollm2_trace, "decoder.attn"
    n = len(trace.tokens)
    monkeypatch.setattr("attention_atlas.model.core.attention.summary.ROLLOUT_SIZE", n // 4)
    got = summarise_site(trace, site, size=32)
    assert got.rollout is not None and not got.rollout_is_exact and got.rollout.shape == (n // 4, n // 4)
    np.testing.assert_allclose(got.rollout.sum(-1), 1.0, atol=1e-6)  # float32
    starts = got.rollout_starts
    exact = reference_rollout([whole(trace, site, layer) for layer in range(trace.n_layers(site))])
    block_sums = np.add.reduceat(np.add.reduceat(exact, starts[:-1], 0), starts[:-1], 1)
    expected = block_sums / np.diff(starts)[:, None]  # mean over a block's queries, sum over its keys
    assert np.abs(got.rollout - expected).max() < 0.05
    assert np.triu(got.rollout, 1).max() == 0  # causal: no block draws on a later block


def whole(trace, site: str, layer: int) -> np.ndarray:
    """(heads, q, k) float32: a captured pattern, or a kept source's computed whole (float32, not float16)."""
    source = trace.pattern_source(site, layer)
    return source.pattern(dtype=np.float32) if source is not None else trace.pattern(site, layer).astype(np.float32)


@pytest.mark.parametrize("model_id", ["toy-date", "minilm"])
def test_every_site_of_a_model_reduces_like_its_whole_patterns(model_id: str, reduction) -> None:
    runner = load_runner(model_id)
    trace = runner.run(runner.examples[0], options=RunOptions(hooks=("*.hook_pattern",)))
    for site in trace.sites():
        layers = [whole(trace, site, layer) for layer in range(trace.n_layers(site))]
        got = summarise_site(trace, site, size=8)
        one_sequence = "cross" not in site
        for layer, pattern in enumerate(layers):
            assert_statistics(got.statistics[layer], reference_statistics(pattern, one_sequence, trace.query_ids(site)))
        if one_sequence:
            np.testing.assert_allclose(got.rollout, reference_rollout(layers), atol=1e-6)


def test_padded_rows_that_see_only_keys_before_their_block_reduce_like_their_whole_patterns(reduction) -> None:
    """MiniLM padded to 160 tokens: the second block of query rows (128-159, all padding) sees only the text's
    few keys, every one before the block's first row."""
    runner = load_runner("minilm")
    trace = runner.run("The cat sat on the mat.", options=RunOptions(hooks=("*.hook_pattern",), pad_to=160,
                                                                   summarised=True))
    made, site = trace.summaries["encoder.attn"], "encoder.attn"
    assert len(trace.tokens) == 160 and trace.masks[site][150].sum() < 20
    layers = [whole(trace, site, layer) for layer in range(trace.n_layers(site))]
    for layer, pattern in enumerate(layers):
        assert_statistics(made.statistics[layer], reference_statistics(pattern, True, trace.ids))
    np.testing.assert_allclose(summarise_site(trace, site).statistics, made.statistics, atol=1e-9)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5", "bart", "marian"])
def test_a_summary_made_in_the_run_equals_one_made_from_its_trace(runners, family: str, reduction) -> None:
    """RunOptions.summarised: every site reduced on the model's device before the capture moves to the host
    (GQA, T5's bias, cross-attention), the same numbers as reducing the trace's kept sources afterwards."""
    runner = runners[family]
    text = runner.examples[0]
    trace = runner.run(text, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    assert trace.summaries and set(trace.summaries) == set(trace.sites())
    for site, made in trace.summaries.items():
        later = summarise_site(trace, site)
        np.testing.assert_allclose(made.thumbnails, later.thumbnails, atol=1e-7)
        np.testing.assert_allclose(made.statistics, later.statistics, atol=1e-9)
        if later.rollout is None:
            assert made.rollout is None
        else:
            np.testing.assert_allclose(made.rollout, later.rollout, atol=1e-9)
    assert trace.nbytes > runner.run(text, options=RunOptions(hooks=("*.hook_pattern",))).nbytes  # counted


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5", "bart", "marian"])
def test_a_summarised_run_computes_attention_once_with_the_plain_runs_outputs(runners, family, monkeypatch,
                                                                            reduction) -> None:
    """With a summary, each layer's attention output is made from the probabilities the summary reads
    (PatternInputs.summary_rows): the fused kernel runs for none of the captured layers (only for the steps a
    decoder generates after), and every layer's outputs and the model's prediction are the plain run's (float32,
    1e-5), in every family (GQA, T5's bias, cross-attention)."""
    runner = runners[family]
    text = runner.examples[0]
    hooks = ("*.hook_pattern", "*attn_out", "*.hook_resid_post")
    fused_calls = []
    fused = heads._fused
    monkeypatch.setattr(heads, "_fused", lambda *args: fused_calls.append(1) or fused(*args))
    plain = runner.run(text, options=RunOptions(hooks=hooks))
    plain_calls, fused_calls[:] = len(fused_calls), []
    made = runner.run(text, options=RunOptions(hooks=hooks, summarised=True))
    assert plain_calls - len(fused_calls) == len(plain.pattern_sources) > 0
    compared = [name for name in plain.captured if not name.endswith("hook_pattern")]
    assert any("attn_out" in name for name in compared) and any("resid_post" in name for name in compared)
    for name in compared:
        np.testing.assert_allclose(made.captured[name], plain.captured[name], atol=1e-5, err_msg=name)
    assert made.output_text == plain.output_text
    for key, value in plain.outputs.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(made.outputs[key], value, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(made.outputs[key], value, err_msg=key)


@pytest.mark.parametrize("family", ["bert", "llama", "t5", "bart"])
def test_a_blocks_heads_read_in_passes_give_the_numbers_of_one_pass(runners, family: str, monkeypatch) -> None:
    """The CPU's kernel reads a long text's blocks in passes of whole key heads' groups (source.PASS_BYTES, so a pass's
    scores stay in the cache): a pass a key head gives one pass's summary and attention outputs (GQA: llama's two
    query heads a key head; T5's bias; cross-attention)."""
    if native.attention_rows() is None:
        assert not os.environ.get("CI"), "the native kernel did not compile in CI"
        pytest.skip("no C compiler here: the native kernel is not built")
    runner = runners[family]
    options = RunOptions(hooks=("*.hook_pattern", "*attn_out"), summarised=True)
    one = runner.run(runner.examples[0], options=options)
    passes = []
    split = source.head_passes
    monkeypatch.setattr(source, "head_passes", lambda *args: passes.append(split(*args)) or passes[-1])
    monkeypatch.setattr(source, "PASS_BYTES", 1)  # every key head's group a pass of its own
    many = runner.run(runner.examples[0], options=options)
    kv_heads = runner.model.config.to_dict().get("num_key_value_heads") or 4  # the tiny models' 4 heads elsewhere
    assert passes and all(len(split) == kv_heads for split in passes)
    for site, made in many.summaries.items():
        np.testing.assert_allclose(made.thumbnails, one.summaries[site].thumbnails, atol=1e-7)
        np.testing.assert_allclose(made.statistics, one.summaries[site].statistics, atol=1e-6)
        if made.rollout is not None:
            np.testing.assert_allclose(made.rollout, one.summaries[site].rollout, atol=1e-6)
    for name, value in one.captured.items():
        np.testing.assert_allclose(many.captured[name], value, atol=1e-6, err_msg=name)


def test_passes_hold_whole_groups_of_query_heads_at_most_the_bytes_asked() -> None:
    assert scratch.head_passes(3, 3, 4 << 20, None) == [slice(0, 9)]  # every head
    assert scratch.head_passes(3, 3, 4 << 20, 16 << 20) == [slice(0, 3), slice(3, 6), slice(6, 9)]  # 12 MB a key head
    assert scratch.head_passes(12, 1, 1 << 20, 16 << 20) == [slice(0, 12)]  # MiniLM: one pass of 12 MB
    assert scratch.head_passes(12, 1, 2 << 20, 16 << 20) == [slice(0, 6), slice(6, 12)]  # even: 6 and 6, not 8 and 4
    assert scratch.head_passes(2, 4, 8 << 20, 16 << 20) == [slice(0, 4), slice(4, 8)]  # a group over the bytes: alone


def test_no_summary_is_made_unless_asked() -> None:
    runner = load_runner("minilm")
    assert runner.run("a short text", options=RunOptions(hooks=("*.hook_pattern",))).summaries == {}


def test_a_trace_keeps_one_copy_of_each_sites_mask(runners) -> None:
    """The sources of a site's layers hold the site's mask array itself (no second (L, L) copy in the trace)."""
    for family in ("llama", "bart"):
        trace = runners[family].run(runners[family].examples[0], options=RunOptions(hooks=("*.hook_pattern",)))
        for site in trace.sites():
            for layer in range(trace.n_layers(site)):
                assert trace.pattern_source(site, layer).allowed is trace.masks[site]


def test_mean_distance_sums_each_rows_products_apart_exact_to_1e_6_at_8192_keys() -> None:
    """A block of 113 rows halfway through 8,192 keys, most attention on the first token (as long texts give): one
    float32 product of all rows and keys at once came out 3e-4 too low; summed row by row it is within 1e-6."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(9, 113, 8192, generator=generator) * 2
    scores[..., 0] += 12
    p, first = torch.softmax(scores, -1), 4000
    positions = torch.arange(8192, dtype=torch.float64)
    distances = (positions[None, :] - positions[first : first + 113, None]).abs()  # (rows, keys)
    expected = (p.double() * distances).sum((1, 2))
    got = row_distances(first, p).sum(-1).double()
    assert ((got - expected) / expected).abs().max() < 1e-6


def test_whole_causal_patterns_read_in_wide_blocks_keep_their_rollout_factors_as_triangles() -> None:
    """A trace that keeps its patterns whole gives blocks of every key; its causal factors still keep half the
    bytes, and a bidirectional layer's (its first block sees later keys) keeps its whole square."""
    n, rng = 300, np.random.default_rng(1)
    causal = np.tril(rng.random((2, n, n))).astype(np.float32)
    causal /= causal.sum(-1, keepdims=True)
    full = rng.random((2, n, n)).astype(np.float32)
    full /= full.sum(-1, keepdims=True)
    got = summarise((blocks_of(p, rows=128) for p in (causal, full)), (2, n, n), size=8, self_attention=True)
    assert got.layer_flows[0].ndim == 1 and got.layer_flows[1].shape == (n, n)
    np.testing.assert_allclose(got.rollout, reference_rollout([causal, full]), atol=1e-6)
