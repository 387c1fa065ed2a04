"""The head view: which lines are drawn, how many, and how big the figure gets."""

import json

import numpy as np
import plotly.graph_objects as go
import pytest

from attention_atlas.viz.head_lines import BIN_WIDTHS, head_lines_figure, select_lines
from attention_atlas.viz.tokens import plotly_label


def softmax_pattern(heads: int, q_len: int, k_len: int, seed: int = 0) -> np.ndarray:
    scores = np.random.default_rng(seed).normal(scale=2.0, size=(heads, q_len, k_len))
    weights = np.exp(scores)
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)


def line_traces(fig: go.Figure, head: int | None = None) -> list:
    return [t for t in fig.data if t.mode == "lines" and (head is None or t.legendgroup == f"head {head}")]


def segments(fig: go.Figure, head: int | None = None) -> list[tuple[int, int]]:
    """(query, key) of every drawn segment, read back from the traces."""
    out = []
    for t in line_traces(fig, head):
        ys = np.asarray(t.y, dtype=float)
        ys = ys[~np.isnan(ys)].astype(int).tolist()
        out += list(zip(ys[0::2], ys[1::2], strict=True))
    return out


def tokens(n: int) -> list[str]:
    return [f"t{i}" for i in range(n)]


def test_one_segment_per_weight_above_threshold() -> None:
    pattern = softmax_pattern(3, 5, 6)
    pattern[0, 2, 3] = 0.9  # a strong line that must be drawn in the widest bin
    fig = head_lines_figure(pattern, tokens(5), tokens(6), heads=[0, 1, 2], threshold=0.1)
    assert len(segments(fig)) == int((pattern >= 0.1).sum())
    for h in range(3):
        expected = {(int(q), int(k)) for q, k in zip(*np.nonzero(pattern[h] >= 0.1), strict=True)}
        assert set(segments(fig, h)) == expected
    widest = [t for t in line_traces(fig, 0) if t.line.width == BIN_WIDTHS[-1]]
    assert (2, 3) in segments(go.Figure(widest))
    assert sum(1 for t in fig.data if t.showlegend) == 3  # one legend entry per head
    hover = next(t for t in fig.data if t.mode == "markers" and t.legendgroup == "head 0")
    assert len(hover.customdata) == int((pattern[0] >= 0.1).sum())
    assert any(c.startswith("t2 (2) → t3 (3): 0.9") for c in hover.customdata)


def test_focus_draws_only_that_query() -> None:
    pattern = softmax_pattern(2, 7, 7)
    fig = head_lines_figure(pattern, tokens(7), tokens(7), heads=[0, 1], focus=4, threshold=0.05)
    drawn = segments(fig)
    assert drawn and {q for q, _ in drawn} == {4}
    assert len(drawn) == int((pattern[:, 4] >= 0.05).sum())
    with pytest.raises(ValueError, match="focus"):
        head_lines_figure(pattern, tokens(7), tokens(7), heads=[0], focus=7)


def test_max_lines_keeps_the_strongest() -> None:
    pattern = softmax_pattern(2, 10, 10)
    kept = select_lines(pattern, [0, 1], threshold=0.0, max_lines=15)
    assert len(kept.weight) == 15
    strongest = np.sort(pattern.ravel())[::-1][:15]
    assert np.allclose(np.sort(kept.weight)[::-1], strongest)
    assert np.allclose(pattern[kept.head, kept.query, kept.key], kept.weight)
    fig = head_lines_figure(pattern, tokens(10), tokens(10), heads=[0, 1], threshold=0.0, max_lines=15)
    assert len(segments(fig)) == 15


def test_unlisted_head_draws_nothing() -> None:
    pattern = np.zeros((3, 4, 4), dtype=np.float32)
    pattern[1] = np.eye(4)
    pattern[2] = 1.0  # every weight of head 2 is strong, but head 2 is not asked for
    fig = head_lines_figure(pattern, tokens(4), tokens(4), heads=[0, 1])
    assert segments(fig, 2) == [] and not [t for t in fig.data if t.legendgroup == "head 2"]
    assert sorted(segments(fig)) == [(i, i) for i in range(4)]
    assert set(select_lines(pattern, [0, 1]).head.tolist()) == {1}


def test_float16_input() -> None:
    pattern = softmax_pattern(2, 6, 6).astype(np.float16)
    fig = head_lines_figure(pattern, tokens(6), tokens(6), heads=[1])
    assert len(segments(fig)) == int((pattern[1].astype(np.float32) >= 0.02).sum()) > 0
    json.loads(fig.to_json())


def test_labels_are_escaped() -> None:
    bad = "<img src=x onerror=alert(1)>"
    pattern = np.full((1, 2, 2), 0.5, dtype=np.float32)
    payload = head_lines_figure(pattern, [bad, "a"], ["b", bad], heads=[0]).to_json()
    text = json.dumps(json.loads(payload), ensure_ascii=False)  # undo any \u003c escaping of the JSON itself
    assert "<img" not in text
    assert plotly_label(bad) in text and "&lt;img" in text


def test_payload_stays_small_at_512_tokens_and_9_heads() -> None:
    n = 512
    pattern = softmax_pattern(9, n, n).astype(np.float16)
    fig = head_lines_figure(pattern, tokens(n), tokens(n), heads=range(9))
    assert len(segments(fig)) == 4000
    assert fig.layout.height == 2400  # capped: rows get tighter instead
    assert len(fig.to_json()) < 1_500_000
