"""Patterns kept as their sources (model/core/attention/source.py): computed in parts, they agree with the whole; shrunk
for the model view, they are the block means the thumbnails draw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import scratch as scratch_module
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.row_reduction import RowLayout
from attention_atlas.model.core.attention.scratch import Scratch, block_reductions, mask_spans
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from attention_atlas.viz.thumbnails import resample


@pytest.fixture(scope="module")
def source():
    """Layer 3 of SmolLM2 reading 300 tokens: 9 query heads sharing 3 key/value heads, causal."""
    runner = load_runner("smollm2")
    text = "The quick brown fox jumps over the lazy dog. " * 30
    trace = runner.run(text, options=RunOptions(hooks=("*.hook_pattern",)))
    assert len(trace.tokens) >= 300
    return trace.pattern_source("decoder.attn", 3)


def test_heads_and_rows_computed_apart_equal_the_whole(source) -> None:
    whole = source.pattern(dtype=np.float32)  # (heads, q, k)
    np.testing.assert_allclose(whole.sum(-1), 1, atol=1e-5)
    assert np.triu(whole, 1).max() == 0
    rows = [0, 5, 299, 17]
    np.testing.assert_array_equal(source.pattern(heads=[4, 1], rows=rows, dtype=np.float32), whole[[4, 1]][:, rows])
    np.testing.assert_array_equal(source.pattern(heads=7, dtype=np.float32)[0], whole[7])
    np.testing.assert_allclose(source.pattern(), whole, atol=1e-3)  # float16 by default


@pytest.mark.parametrize("size", [32, 25])  # dividing the length or not
def test_shrunk_thumbnails_are_the_block_means_of_the_drawn_part(source, size: int) -> None:
    whole = source.pattern(dtype=np.float32)
    n = whole.shape[-1]
    for rows, cols in ((np.arange(n), np.arange(n)), (np.arange(1, n, 2), np.arange(3, n))):
        expected = np.stack([resample(head[np.ix_(rows, cols)], size) for head in whole])
        np.testing.assert_allclose(source.shrunk(size, rows, cols), expected, atol=1e-7)
    few = np.arange(10)  # fewer rows than pixels: the part itself, for the thumbnails to enlarge
    # (its future keys are not computed: exactly 0, the others as the whole's to float32 rounding)
    np.testing.assert_allclose(source.shrunk(size, few, np.arange(n)), whole[:, few], atol=1e-6)


@pytest.mark.parametrize("model_id", ["smollm2", "toy-date"])
def test_one_head_of_a_trace_is_that_head_of_its_layer(model_id: str) -> None:
    runner = load_runner(model_id)
    trace = runner.run(runner.examples[0], options=RunOptions(hooks=("*.hook_pattern",)))
    for site in trace.sites():
        layer = trace.n_layers(site) - 1
        np.testing.assert_array_equal(trace.head_pattern(site, layer, 2), trace.pattern(site, layer)[2])


def test_asking_which_patterns_a_trace_has_computes_none(runners, monkeypatch) -> None:
    """`name in trace.attention` and `trace.sites()` (every page rerun asks) must not compute a kept pattern: at
    8,192 tokens one layer's is 1.2 GB and a second."""
    trace = runners["llama"].run("a few words here", options=RunOptions(hooks=("*.hook_pattern",)))

    def computed(*args, **kwargs):
        raise AssertionError("a pattern was computed")

    monkeypatch.setattr("attention_atlas.model.core.attention.source.PatternSource.pattern", computed)
    assert trace.sites() == ["decoder.attn"]
    assert "decoder.0.attn.hook_pattern" in trace.attention and "decoder.9.attn.hook_pattern" not in trace.attention


def test_scores_far_below_a_rows_greatest_give_eagers_probabilities_and_hidden_keys_exactly_0(reduction) -> None:
    """Scores spanning hundreds (tiny probabilities, under float32's smallest normal number, computed from
    EXP_FLOOR) agree with a float64 softmax to 1e-12; a key the mask hides is exactly 0, wherever it lies."""
    rng = np.random.default_rng(0)
    n, d_head = 40, 8
    query = rng.normal(size=(2, n, d_head)).astype(np.float32) * 6
    key = rng.normal(size=(1, n, d_head)).astype(np.float32) * 6  # one key head read by both (GQA)
    allowed = np.tril(np.ones((n, n), dtype=bool))
    allowed[:, 3] = False  # a key hidden from every row, left of the diagonal
    allowed[:, 0] = True
    source = PatternSource(query=query, key=key, scale=1.0, allowed=allowed)
    got = source.pattern(dtype=np.float32)
    scores = np.einsum("hqd,kd->hqk", query.astype(np.float64), key[0].astype(np.float64))
    assert (scores.max(-1, keepdims=True) - np.where(allowed, scores, np.inf)).max() > 200  # the floor is reached
    scores = np.where(allowed, scores, -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-12)
    assert (got[:, ~allowed] == 0).all()
    layout = RowLayout(block_starts(n, n).astype(np.int32), None, positional=True)
    reduced = next(source.reduced_rows(layout))  # all 40 rows: one block
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = -np.where(expected > 0, expected * np.log2(expected), 0).sum(-1)
    np.testing.assert_allclose(reduced.statistics[:, 0].numpy(), bits.sum(-1), rtol=1e-4, atol=40e-6)  # 40 rows
    np.testing.assert_allclose(reduced.thumbnail.numpy(), expected, rtol=1e-4, atol=1e-12)  # a block a key


def test_a_row_that_sees_no_key_is_uniform_as_in_eager_attention() -> None:
    """Eager attention's softmax over a row of the mask's minimum only is uniform over every key; the other rows
    keep their hidden keys at exactly 0."""
    rng = np.random.default_rng(1)
    n = 6
    allowed = np.tril(np.ones((n, n), dtype=bool))
    allowed[2] = False  # query 2 sees nothing
    source = PatternSource(query=rng.normal(size=(3, n, 4)).astype(np.float32),
                           key=rng.normal(size=(3, n, 4)).astype(np.float32), scale=0.5, allowed=allowed)
    got = source.pattern(dtype=np.float32)
    np.testing.assert_allclose(got[:, 2], 1 / n, rtol=1e-6)
    seeing = np.ones(n, dtype=bool)
    seeing[2] = False
    assert (got[:, seeing][:, ~allowed[seeing]] == 0).all()
    np.testing.assert_allclose(got.sum(-1), 1, rtol=1e-6)


def _span_by_definition(block: np.ndarray) -> tuple[int, int, bool]:
    """(first, end, every row sees a key) of one block of mask rows, read off its definition key by key."""
    k_len = block.shape[1]
    every_row = bool(all(row.any() for row in block))
    seen = [k for k in range(k_len) if block[:, k].any()]
    end = seen[-1] + 1 if every_row else k_len
    hidden = [k for k in range(k_len) if not block[:, k].all()]
    return min(hidden[0] if hidden else k_len, end), end, every_row


@pytest.mark.parametrize(("rows", "keys", "step"), [(300, 300, 128), (256, 200, 128), (130, 140, 16), (7, 9, 16)])
def test_mask_spans_of_every_block_at_once_are_each_blocks_own(rows: int, keys: int, step: int) -> None:
    """Causal, full, random with rows that see nothing, and padded masks; whole blocks and a shorter last one."""
    rng = np.random.default_rng(rows)
    padded = np.tril(np.ones((rows, keys), bool))
    padded[:, :5], padded[-3:] = False, False
    hiding = rng.random((rows, keys)) < 0.3
    hiding[rng.integers(0, rows, 3)] = False
    for mask in (np.tril(np.ones((rows, keys), bool)), np.ones((rows, keys), bool), hiding, padded):
        expected = [_span_by_definition(mask[start : start + step]) for start in range(0, rows, step)]
        assert mask_spans(torch.from_numpy(mask), step) == expected


def test_a_scratch_finds_a_masks_spans_once_for_every_view_of_it(monkeypatch) -> None:
    """Every layer of a capture reads the same mask through a view of its own: its spans are reduced once."""
    calls = []
    monkeypatch.setattr(scratch_module, "mask_spans", lambda allowed, step: calls.append(step) or [(0, 1, True)])
    mask = torch.ones(2, 16, 16, dtype=torch.bool)
    scratch = Scratch()
    assert scratch.spans(mask[0], 16) == scratch.spans(mask[0], 16) == [(0, 1, True)]
    scratch.spans(mask[1], 16)  # another run's mask
    scratch.spans(mask[0], 8)  # other blocks
    assert calls == [16, 16, 8]


@pytest.mark.parametrize(("rows", "keys", "step"), [(256, 300, 128), (130, 140, 16)])
def test_a_masks_block_reductions_are_the_same_in_torch_as_in_numpy(rows: int, keys: int, step: int) -> None:
    """Off the CPU a mask's spans are reduced by torch, on its device: the same reductions as numpy's."""
    mask = np.random.default_rng(rows).random((rows, keys)) < 0.5
    mask[3] = False  # a row that sees nothing
    for in_numpy, in_torch in zip(block_reductions(mask, step), block_reductions(torch.from_numpy(mask), step),
                                  strict=True):
        np.testing.assert_array_equal(in_numpy, in_torch.numpy())
