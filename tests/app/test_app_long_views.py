"""The One head view drawn so a long text reads: by distance back, with its sink apart, and the whole head
max-pooled above the window (toy-copy's and SmolLM2's heads; a window of 5 stands in for 512). Each figure holds
the head's own numbers, computed here from its pattern."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

import attention_atlas as aa
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array

LINK = {"model": "toy-copy", "text": "hello world", "view": "One head", "site": "encoder.attn", "layer": "1",
        "head": "2"}


@pytest.fixture(scope="module")
def pattern() -> np.ndarray:
    """toy-copy's encoder layer 1 head 2 on the text, (12, 12)."""
    trace = aa.load("toy-copy").run("hello world")
    return trace.head_pattern("encoder.attn", 1, 2)


def test_by_distance_back_each_query_reads_its_keys_behind_it(pattern) -> None:
    at = open_app_page("app_pages/attention.py", "toy-copy", params=LINK | {"draw": "distance"})
    assert_ok(at, "distance")
    z = plotly_array(chart(at, "by distance back")["data"][0]["z"])  # (12, 65)
    n = len(pattern)
    expected = np.full((n, 65), np.nan)
    for i in range(n):
        for d in range(min(i + 1, 65)):
            expected[i, d] = pattern[i, i - d]
    np.testing.assert_allclose(z, expected, atol=1e-6)
    assert at.query_params["draw"] == "distance"


def test_the_whole_head_is_max_pooled_above_a_window(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.viz.heatmap.WINDOW", 5)  # toy-copy's 13 tokens stand in for 2,048
    monkeypatch.setattr("attention_atlas.ui.long_head_views.WINDOW", 5)
    monkeypatch.setattr("attention_atlas.model.inspect.long_head.POOLED", 4)
    text = "hello there"  # a run of its own: the other tests' head overviews are kept with theirs
    at = open_app_page("app_pages/attention.py", "toy-copy", params=LINK | {"text": text})
    assert_ok(at, "pooled")
    pattern = aa.load("toy-copy").run(text).head_pattern("encoder.attn", 1, 2)  # (13, 13)
    spec = chart(at, "max-pooled")
    starts = (np.arange(5) * 13) // 4  # 4 blocks of 3 or 4 positions
    expected = np.array([[pattern[a:b, c:d].max() for c, d in pairwise(starts)] for a, b in pairwise(starts)])
    np.testing.assert_allclose(plotly_array(spec["data"][0]["z"]), expected, atol=1e-6)
    assert spec["layout"]["shapes"][0]["type"] == "rect"  # the window drawn below, outlined


def test_the_sink_is_drawn_apart_on_its_own_scale() -> None:
    text = "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun."
    model = aa.load("smollm2")
    trace = model.run(text)
    shares = np.stack([trace.head_pattern("decoder.attn", 20, h)[:, 0].mean() for h in range(9)])  # (heads,)
    head = int(np.argmax(shares))  # the head that gives the first token most
    at = open_app_page("app_pages/attention.py", "smollm2", params={
        "model": "smollm2", "text": text, "view": "One head", "site": "decoder.attn", "layer": "20",
        "head": str(head), "draw": "sink"})
    assert_ok(at, "sink apart")
    assert any(f"took {shares[head]:.1%} of this head's attention over every query" in c.value for c in at.caption)
    spec = chart(at, "the sink apart")
    sink, rest = spec["data"][0], spec["data"][1]
    whole = trace.head_pattern("decoder.attn", 20, head)
    np.testing.assert_allclose(plotly_array(sink["z"])[:, 0], whole[:, 0], atol=1e-5)
    assert rest["x"][0].startswith("#1") and len(rest["x"]) == whole.shape[1] - 1  # every other key


def test_the_notebook_draws_the_same_figures(pattern) -> None:
    """aa.plot.by_distance, pooled and sink_apart draw what the page draws, from the head's own numbers."""
    trace = aa.load("toy-copy").run("hello world")
    name = "encoder.1.attn.hook_pattern"
    z = plotly_array(aa.plot.by_distance(trace, name, 2).to_plotly_json()["data"][0]["z"])
    np.testing.assert_allclose(z[5, :6], pattern[5, 5::-1], atol=1e-6)  # query 5, keys 5, 4, … 0
    np.testing.assert_allclose(aa.plot.pooled(trace, name, 2).data[0].z, pattern, atol=1e-6)  # 12 blocks of one
    with pytest.raises(ValueError, match="no sink to draw apart"):  # toy-copy's heads spread their attention
        aa.plot.sink_apart(trace, name, 2)
