"""A block of attention rows reduced (model/core/attention/row_reduction.py) by the native CPU kernel and by torch ops:
the same numbers as from the whole float64 softmax, for every kind of mask a model gives, and the same attention
output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.row_reduction import STATISTICS, RowLayout, induction_targets
from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.source import PatternSource


def masks(n: int, k: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """(n, k) bool masks as the models apply them."""
    causal = np.tril(np.ones((n, k), dtype=bool), k - n)
    padded = np.ones((n, k), dtype=bool)
    padded[:, k - 7 :] = False  # padding: the last keys hidden from every row
    scattered = rng.random((n, k)) < 0.3  # a custom mask, rows that see nothing among them
    scattered[5] = False
    blocked = causal.copy()
    blocked[:, 3] = False  # a key hidden from every row, left of the diagonal
    blocked[40:50, :30] = False
    return {"full": np.ones((n, k), dtype=bool), "causal": causal, "padded": padded, "scattered": scattered,
            "blocked": blocked}


def reference(source: PatternSource) -> np.ndarray:
    """(heads, q, k) float64: softmax(Q K^T x scale + M) as eager attention computes it (a row that sees no key:
    uniform)."""
    query, key = source.query.astype(np.float64), source.key.astype(np.float64)
    key = np.repeat(key, len(query) // len(key), 0)
    scores = np.einsum("hqd,hkd->hqk", query, key) * source.scale
    scores = np.where(source.allowed, scores, -np.inf)
    scores = np.where(source.allowed.any(-1)[:, None], scores, 0.0)  # no key seen: every key alike
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def expected_reductions(p: np.ndarray, layout: RowLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(heads, len(STATISTICS)) statistic sums over the rows, (heads, q, t_k) thumbnail column sums, (q, b) rollout
    column sums."""
    _, q, k = p.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log2(p), 0.0).sum(-1)
    i, later = np.arange(q), np.arange(layout.from_row, q)
    sums = np.zeros((len(p), len(STATISTICS)))
    sums[:, 0], sums[:, 2], sums[:, 5] = entropy.sum(-1), p[:, :, 0].sum(-1), p[:, later, 0].sum(-1)
    if layout.positional:
        sums[:, 1] = (p * np.abs(i[:, None] - np.arange(k)[None])).sum((1, 2))
        sums[:, 3] = p[:, i[1:], i[1:] - 1].sum(-1)
        sums[:, 4] = p[:, i, i].sum(-1)
        sums[:, 6] = p[:, later[later > 0], later[later > 0] - 1].sum(-1)
        sums[:, 8] = (p * np.abs(i[:, None] - np.arange(k)[None]))[..., 1:].sum((1, 2))  # off the first key
    if layout.targets is not None:
        rows = np.flatnonzero(layout.targets >= 0)
        sums[:, 7] = p[:, rows, layout.targets[rows]].sum(-1)
    thumbnail = np.add.reduceat(p, layout.thumbnail_starts[:-1], -1)
    rollout = (None if layout.rollout_starts is None
               else np.add.reduceat(p.sum(0), layout.rollout_starts[:-1], -1))
    return sums, thumbnail, rollout


def reduce(source: PatternSource, layout: RowLayout, value: torch.Tensor):
    """Every block of the source reduced, with the attention output (heads, q, d_head)."""
    output = torch.zeros(len(source.query), source.query.shape[1], value.shape[-1])
    blocks = list(source.reduced_rows(layout, value, output))
    return blocks, output


@pytest.mark.parametrize("mask", ["full", "causal", "padded", "scattered", "blocked"])
@pytest.mark.parametrize(("thumbnail", "rollout"), [(8, 16), (12, 160), (160, None)])
def test_both_ways_reduce_a_block_as_the_whole_softmax_does(reduction, monkeypatch, mask, thumbnail, rollout) -> None:
    """160 queries in blocks of 64 rows (the last shorter), 3 query heads sharing one key head, some scores far
    apart (the floor reached); thumbnails and rollouts of equal, unequal and one-key column blocks; the later queries'
    shares from a row inside the second block, and induction targets of a text of 12 tokens' ids."""
    monkeypatch.setattr("attention_atlas.model.core.attention.source.ROW_BLOCK", 64)
    monkeypatch.setattr("attention_atlas.model.core.attention.source.SEEN_ROW_BLOCK", 64)  # the full mask's
    rng = np.random.default_rng(3)
    n, d_head = 160, 8
    allowed = masks(n, n, rng)[mask]
    query = rng.normal(size=(3, n, d_head)).astype(np.float32) * 3
    query[2] *= 8  # a head whose scores span hundreds of bits
    source = PatternSource(query=query, key=rng.normal(size=(1, n, d_head)).astype(np.float32), scale=0.5,
                           allowed=allowed)
    layout = RowLayout(block_starts(n, thumbnail).astype(np.int32),
                       None if rollout is None else block_starts(n, rollout).astype(np.int32), positional=True,
                       from_row=70, targets=induction_targets(rng.integers(0, 12, n)))
    value = torch.from_numpy(rng.normal(size=(1, n, 5)).astype(np.float32))
    blocks, output = reduce(source, layout, value)
    p = reference(source)
    sums, thumbs, rolls = expected_reductions(p, layout)
    assert [b.start for b in blocks] == [0, 64, 128]
    np.testing.assert_allclose(sum(b.statistics.double() for b in blocks).numpy(), sums, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(torch.cat([b.thumbnail for b in blocks], 1).numpy(), thumbs, rtol=1e-4, atol=1e-7)
    if rolls is None:
        assert all(b.rollout is None for b in blocks)
    else:
        np.testing.assert_allclose(torch.cat([b.rollout for b in blocks]).numpy(), rolls, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(output.numpy(), p @ value[0].double().numpy(), rtol=1e-4, atol=1e-5)
    for b in blocks:  # not causal where a row has attention after the block's last row; never where none after itself
        rows = p[:, b.start : b.start + 64]  # (heads, 64, n): row i is query b.start + i
        after_block, after_itself = bool((rows[..., b.start + 64 :] > 0).any()), bool(np.triu(rows, b.start + 1).any())
        assert after_block <= b.sees_ahead <= after_itself


def test_a_mask_that_hides_nothing_is_reduced_in_larger_blocks(reduction) -> None:
    """Where every row sees every key there is nothing for fewer rows to skip: blocks of SEEN_ROW_BLOCK rows, else of
    ROW_BLOCK (the same numbers either way: the test above). Every block of the full mask, the last (no key after its
    last row) too, says that its rows see ahead, and no causal block does (the summary checks a flow for a triangle
    only where none did)."""
    rng = np.random.default_rng(6)
    n = 600
    layout = RowLayout(block_starts(n, 64).astype(np.int32), None, positional=True)
    starts, ahead = {}, {}
    for mask in ("full", "causal"):
        allowed = masks(n, n, rng)[mask]
        source = PatternSource(query=rng.normal(size=(2, n, 4)).astype(np.float32),
                               key=rng.normal(size=(2, n, 4)).astype(np.float32), scale=0.5, allowed=allowed)
        blocks = list(source.reduced_rows(layout))
        starts[mask], ahead[mask] = [block.start for block in blocks], {block.sees_ahead for block in blocks}
    assert starts == {"full": [0, 512], "causal": list(range(0, n, 128))}
    assert ahead == {"full": {True}, "causal": {False}}


def test_cross_attention_measures_no_positions(reduction) -> None:
    """Queries and keys of two sequences (q 30, k 50): entropy and the first key's share, nothing positional."""
    rng = np.random.default_rng(4)
    source = PatternSource(query=rng.normal(size=(2, 30, 4)).astype(np.float32),
                           key=rng.normal(size=(2, 50, 4)).astype(np.float32), scale=1.0,
                           allowed=np.ones((30, 50), dtype=bool))
    layout = RowLayout(block_starts(50, 8).astype(np.int32), None, positional=False)
    [block], _ = reduce(source, layout, torch.zeros(2, 50, 3))
    sums, thumbs, _ = expected_reductions(reference(source), layout)
    np.testing.assert_allclose(block.statistics.numpy(), sums, rtol=2e-5, atol=1e-6)
    assert (block.statistics[:, [1, 3, 4]] == 0).all()
    np.testing.assert_allclose(block.thumbnail.numpy(), thumbs, rtol=1e-5, atol=1e-7)


def test_mean_distance_over_8192_keys_is_exact_to_1e_6(reduction) -> None:
    """4,113 query rows (the last block halfway through) on 8,192 keys, most attention on the first token (as long
    texts give), every row the same query: each row's products summed apart (over 8,192 float32 terms), the sum
    within 1e-6 of float64 (one float32 sum of a block's rows and keys at once came out 3e-4 too low)."""
    rng = np.random.default_rng(0)
    q_len, k_len = 4113, 8192
    key = rng.normal(size=(1, k_len, 2)).astype(np.float32)
    key[0, 0] = [6.0, 0.0]  # the first token draws most attention
    query = np.broadcast_to(np.array([4.0, 0.5], dtype=np.float32), (2, q_len, 2)).copy()
    source = PatternSource(query=query, key=key, scale=1.0, allowed=np.ones((q_len, k_len), dtype=bool))
    layout = RowLayout(block_starts(k_len, 64).astype(np.int32), None, positional=True)
    got = sum(b.statistics[:, 1].double() for b in source.reduced_rows(layout)).numpy()
    scores = key[0].astype(np.float64) @ query[0, 0].astype(np.float64)  # (k_len,): every row's
    p = np.exp(scores - scores.max())
    p /= p.sum()
    assert p[0] > 0.5
    rows, keys = np.arange(q_len), np.arange(k_len)
    each_key = np.array([np.abs(rows - k).sum() for k in keys], dtype=np.float64)  # sum over rows of |i - k|
    expected = (p * each_key).sum()
    assert (np.abs(got - expected) / expected).max() < 1e-6


@pytest.mark.parametrize("mask", ["causal", "full"])
def test_nan_and_infinite_scores_give_the_same_numbers_both_ways(mask) -> None:
    """A NaN or infinite score (a half-precision overflow) gives what the torch ops give, row by row: NaN or +inf
    anywhere a block computes (a hidden key's too) makes the row NaN; -inf is a very low score; a row of nothing but
    -inf is NaN."""
    kernel = native.attention_rows()
    if kernel is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    n, rng = 24, np.random.default_rng(0)
    allowed = masks(n, n, rng)[mask]
    bias = np.zeros((2, n, n), dtype=np.float32)
    bias[0, 3, 1] = np.nan  # a key the row sees
    bias[0, 7, 2] = np.inf
    bias[1, 9, 4] = -np.inf
    bias[1, 12, 13] = np.nan  # a key hidden from the row (causal), computed in the block
    bias[0, 14, 20] = np.inf
    bias[1, 20] = -np.inf  # every key
    source = PatternSource(query=rng.normal(size=(2, n, 4)).astype(np.float32),
                           key=rng.normal(size=(1, n, 4)).astype(np.float32), scale=0.5, allowed=allowed, bias=bias)
    layout = RowLayout(block_starts(n, 8).astype(np.int32), block_starts(n, 12).astype(np.int32), True)

    def blocks(way) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(probabilities (heads, n, n), thumbnail sums (heads, n, 8), rollout sums (n, 12)) of every block."""
        p, thumb, roll = np.zeros((2, n, n), np.float32), [], []
        for heads, start, probabilities, reduced in way:
            rows, width = probabilities.shape[1:]
            p[heads, start : start + rows, :width] = probabilities.numpy()
            if reduced is not None:  # the block's last pass of heads
                thumb.append(reduced.thumbnail.numpy())
                roll.append(reduced.rollout.numpy())
        return p, np.concatenate(thumb, 1), np.concatenate(roll)

    ours = blocks(source._native_blocks(kernel, layout, Scratch()))
    torchs = blocks(source._torch_blocks(layout, Scratch()))
    for got, expected in zip(ours, torchs, strict=True):
        assert np.array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    p = ours[0]
    assert np.isnan(p[0, [3, 7]]).all() and np.isfinite(p[1, 9]).all() and p[1, 9, 4] < 1e-30
    assert np.isnan(p[1, 12]).all() and np.isnan(p[0, 14]).all()  # a key seen (full), or hidden in the block (causal)
    assert np.isnan(p[1, 20]).all()  # as eager attention's softmax of nothing but -inf


@pytest.mark.parametrize("thumbnail", [8, 7])  # column blocks of 3 keys, and of 3 or 4
def test_a_nan_rows_column_blocks_after_its_blocks_keys_are_0_both_ways(monkeypatch, thumbnail) -> None:
    """A causal block of 8 rows computes its first keys only; the column blocks after them are 0 in every row, a NaN
    row's too, whether the blocks are of one length or not."""
    kernel = native.attention_rows()
    if kernel is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    monkeypatch.setattr("attention_atlas.model.core.attention.source.ROW_BLOCK", 8)
    n, rng = 24, np.random.default_rng(1)
    bias = np.zeros((2, n, n), dtype=np.float32)
    bias[0, 3, 1] = np.nan  # row 3 is NaN, in the block of rows 0-7 (keys 0-7 computed)
    source = PatternSource(query=rng.normal(size=(2, n, 4)).astype(np.float32),
                           key=rng.normal(size=(1, n, 4)).astype(np.float32), scale=0.5,
                           allowed=np.tril(np.ones((n, n), dtype=bool)), bias=bias)
    layout = RowLayout(block_starts(n, thumbnail).astype(np.int32), block_starts(n, 12).astype(np.int32), True)
    for way in (source._native_blocks(kernel, layout, Scratch()), source._torch_blocks(layout, Scratch())):
        *_, first = next(way)  # the first block, its heads in one pass (one key head)
        assert np.isnan(first.thumbnail[0, 3, :2].numpy()).all()  # the blocks holding keys 0-7 (blocks of 3 or 4 keys)
        np.testing.assert_array_equal(first.thumbnail[0, 3, 3:].numpy(), 0.0)  # keys 9 on: never computed
        np.testing.assert_array_equal(first.rollout[3, 5:].numpy(), 0.0)
