""""Why here?" on the Attention page's One head view and in Step through: the cell or row a link or the boxes choose,
taken apart as `Model.explain_score` / `explain_pattern` take it apart (the figures hold the API's numbers), the
sentence said from them (on toy-induction: its induction head reads what a layer-0 head that looks at the previous
token wrote, K-composition), and a hybrid's other blocks among the parts."""

from __future__ import annotations

import numpy as np
import pytest

import attention_atlas as aa
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
from tests.tiny_hybrids import build_hybrid

TEXT = "qwertyuiop"  # said twice by toy-induction's tokenizer: <s> q w … p q w … p
LINK = {"model": "toy-induction", "text": TEXT, "view": "One head", "site": "decoder.attn", "layer": "1", "head": "2",
        "why_open": "1"}


@pytest.fixture(scope="module")
def model() -> aa.Model:
    return aa.load("toy-induction")


def test_a_cell_is_taken_apart_as_the_api_takes_it(model) -> None:
    at = open_app_page("app_pages/attention.py", "toy-induction", params=LINK | {"why_query": "14",
                                                                                     "why_key": "5"})
    assert_ok(at, "why here")
    parts = model.explain_score(TEXT, layer=1, head=2, query=14, key=5)
    sentence = at.markdown[-1].value
    assert sentence.startswith("L1H2 attends from ‘r’ (#14) to ‘t’ (#5) mostly because of what")
    assert f"what L0H3 (which looks at the previous token: 26% of its attention) wrote at ‘t’: " \
           f"{max(parts.key_shares):+.3g} of {parts.score:.3g} on the key side" in sentence  # K-composition
    bars = chart(at, "L1H2 · from #14")["data"]
    for trace, names, shares in ((bars[0], parts.query_parts, parts.query_shares),
                                 (bars[1], parts.key_parts, parts.key_shares)):
        order = np.argsort(-np.abs(shares), kind="stable")[:10]
        assert trace["y"] == [names[i] for i in order]
        np.testing.assert_allclose(plotly_array(trace["x"]), shares[order], rtol=1e-6)
    assert at.query_params["why_query"] == "14" and at.query_params["why_key"] == "5"


def test_the_whole_row_names_the_previous_token_head_it_reads(model) -> None:
    """K-composition on screen: from the second 'r', the induction head L1H2 looks at the 't' after the first 'r',
    most of all because of what layer-0 head L0H3, which looks at the previous token, wrote at 't'."""
    at = open_app_page("app_pages/attention.py", "toy-induction", params=LINK | {"why_query": "14", "why": "row"})
    assert_ok(at, "why here, row")
    assert at.markdown[-1].value.startswith("From ‘r’ (#14), L1H2 looks most at ‘t’ (#5, weight 1.00), most of all "
                                            "because of what L0H3 (which looks at the previous token")
    parts = model.explain_pattern(TEXT, layer=1, head=2, query=14)
    heatmap = next(t for t in chart(at, "the row of #14")["data"] if t["type"] == "heatmap")
    rows = [parts.key_parts.index(name) for name in heatmap["y"]]
    np.testing.assert_allclose(plotly_array(heatmap["z"]), parts.key_shares[rows], rtol=1e-6)


def test_step_through_explains_its_head_too() -> None:
    at = open_app_page("app_pages/step_through.py", "toy-induction", params={**LINK, "why_query": "13"})
    at.session_state["step_view"] = "3 · Scores → pattern"
    at.run()
    assert_ok(at, "step through")
    assert at.markdown[-1].value.startswith("L1H2 attends from ‘e’ (#13) to ‘r’ (#4) mostly because of")


def test_a_hybrids_score_is_taken_apart_with_its_other_blocks(tmp_path) -> None:
    """Qwen3.5's attention layer 1 (its block 3) reads what its gated delta-net blocks 0 and 2 wrote: each one part,
    as the API gives them."""
    folder = build_hybrid("qwen3_5_text", tmp_path / "qwen3_5_text")
    at = open_app_page("app_pages/attention.py", folder=str(folder), text="the cat sat on the mat",
                       params={"view": "One head", "layer": "1", "head": "0", "why_open": "1", "why_query": "6",
                               "why_key": "2"})
    assert_ok(at, "hybrid")
    parts = aa.load(folder).explain_score("the cat sat on the mat", layer=1, head=0, query=6, key=2)
    assert {"block 0 (gated delta-net)", "block 2 (gated delta-net)"} <= set(parts.key_parts)
    bars = chart(at, "L1H0 · from #6")["data"]
    order = np.argsort(-np.abs(parts.key_shares), kind="stable")[:10]
    assert bars[1]["y"] == [parts.key_parts[i] for i in order]
    np.testing.assert_allclose(plotly_array(bars[1]["x"]), parts.key_shares[order], rtol=1e-6)
