"""The Attribution page's Circuit on a tiny random Llama (grouped-query heads): the circuit found in the app is the one
`Model.circuit` finds, its graph draws the top edges, and its faithfulness curve is the circuit's own, from 0 (no
edge) to 1 (every edge); a model whose graph is not defined says why."""

from __future__ import annotations

import numpy as np
import pytest

import attention_atlas as aa
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
from tests.tiny_hf import build

CLEAN, CORRUPTED = "the cat sat on the mat a dog sat on the", "the fox sat on the mat a dog sat on the"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("circuit") / "llama")


def test_the_circuit_is_the_apis(folder) -> None:
    at = open_app_page("app_pages/attribution.py", folder=str(folder), text=CLEAN)
    assert_ok(at, "attribution")
    at.text_input(key="attribution_answer").set_value(" cat").run()
    at.text_input(key="attribution_wrong").set_value(" fox").run()
    at.text_input(key="attribution_corrupted").set_value(CORRUPTED).run()
    at.segmented_control(key="attribution_circuit_method").set_value("EAP").run()
    at.button(key="attribution_circuit_find").click().run()
    assert_ok(at, "circuit")
    expected = aa.load(str(folder)).circuit(CLEAN, CORRUPTED, answer=" cat", wrong=" fox", method="EAP")
    curve = chart(at, "faithfulness of the top-n circuit")["data"][0]
    edges = plotly_array(curve["customdata"]).astype(int)
    assert edges[0] == 0 and edges[-1] == len(expected.scores)
    np.testing.assert_allclose(plotly_array(curve["y"]), expected.faithfulness(edges.tolist()), atol=1e-6)
    np.testing.assert_allclose(plotly_array(curve["y"])[[0, -1]], [0.0, 1.0], atol=1e-9)
    graph = chart(at, "circuit: the top 20 edges")
    assert graph["layout"]["title"]["text"].startswith("circuit: the top 20 edges by |EAP score|")
    at.slider(key="attribution_circuit_edges").set_value(5).run()
    assert_ok(at, "five edges")
    kept = expected.faithfulness([5])[0]
    assert any(f"The top 5 of {len(expected.scores):,} edges alone carry {kept:.0%}" in c.value for c in at.caption)


def test_a_toy_model_says_why_it_has_no_circuit() -> None:
    at = open_app_page("app_pages/attribution.py", "toy-gpt-date", "14 feb 1999")
    at.text_input(key="attribution_wrong").set_value("2").run()
    at.text_input(key="attribution_corrupted").set_value("15 feb 1999").run()
    at.button(key="attribution_circuit_find").click().run()
    assert not at.exception
    assert any("circuit" in e.value.lower() for e in at.error), [e.value for e in at.error]


def test_toy_induction_shows_its_induction_circuit() -> None:
    """The pre-norm toy's circuit (tests/model/test_circuit_toy.py: the earlier 'q' and 'm' swapped) found on the
    page is the API's, and the drawing of its top 20 edges holds the previous-token head's edge into the induction
    head's key."""
    clean, corrupted = "kfzqbmxrtjkfzq", "kfzmbqxrtjkfzq"
    at = open_app_page("app_pages/attribution.py", "toy-induction", clean)
    at.text_input(key="attribution_answer").set_value("b").run()
    at.text_input(key="attribution_wrong").set_value("x").run()
    at.text_input(key="attribution_corrupted").set_value(corrupted).run()
    at.button(key="attribution_circuit_find").click().run()
    assert_ok(at, "toy-induction's circuit")
    expected = aa.load("toy-induction").circuit(clean, corrupted, answer="b", wrong="x")
    curve = chart(at, "faithfulness of the top-n circuit")["data"][0]
    edges = plotly_array(curve["customdata"]).astype(int)
    assert edges[-1] == len(expected.scores) == 110
    np.testing.assert_allclose(plotly_array(curve["y"]), expected.faithfulness(edges.tolist()), atol=1e-6)
    graph = chart(at, "circuit: the top 20 edges")
    drawn = [row[2] for row in graph["data"][-1]["customdata"]]
    assert sorted(drawn) == sorted(expected.top(20)) and "a0.h3->a1.h2<k>" in drawn
    assert any("The top 20 of 110 edges alone carry 82%" in c.value for c in at.caption)
