"""Circuits held to the EAP-IG library's own numbers (hannamw/EAP-IG at the commit tests/data/eap_ig_reference.json
names, run by tests/eap_ig_reference.py on the same tiny seeded GPT-2 and grouped-query Llama, converted to
TransformerLens): every edge's EAP and EAP-IG (5 steps) score, `evaluate_graph` of the library's top-20 circuit, of
every edge removed alone from the whole graph, and of its top-n circuits. The models are built again here from their
seed and checked against the weights' fingerprint the library read, so that the comparison is of the same weights.

Tolerance: relative 1e-3; scores also within 1e-5 of the largest score (both sides sum float32 products, whose
rounding is about 1e-6 of the largest: a score near 0 cannot be held relatively)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.circuit import Circuit, find_circuit
from tests.circuit_models import ANSWER, CLEAN, CORRUPTED, FAMILIES, WRONG, build_circuit_model, fingerprint

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "eap_ig_reference.json").read_text())
RTOL = 1e-3


@pytest.fixture(scope="module", params=FAMILIES)
def found(request, tmp_path_factory) -> tuple[str, object, dict[str, Circuit]]:
    """(family, its runner, {method: its circuit}) for each tiny model."""
    family = request.param
    runner = load_hf_runner(str(build_circuit_model(family, tmp_path_factory.mktemp(family))))
    circuits = {method: find_circuit(runner, CLEAN, CORRUPTED, ANSWER, WRONG, method, REFERENCE["steps"])
                for method in ("EAP", "EAP-IG")}
    return family, runner, circuits


def test_the_models_are_the_weights_and_tokens_the_library_read(found) -> None:
    family, runner, _ = found
    recorded = REFERENCE["models"][family]
    ours = fingerprint(runner.model)
    for key, value in recorded["fingerprint"].items():
        assert ours[key] == pytest.approx(value, rel=1e-9), key
    assert {text: runner.text.encode(text) for text in (CLEAN, CORRUPTED)} == recorded["ids"]


@pytest.mark.parametrize("method", ["EAP", "EAP-IG"])
def test_every_edge_score_is_the_librarys(found, method) -> None:
    family, _, circuits = found
    recorded = REFERENCE["models"][family]
    circuit = circuits[method]
    assert circuit.clean == pytest.approx(recorded["clean"], rel=RTOL)
    assert circuit.corrupted == pytest.approx(recorded["corrupted"], rel=RTOL)
    theirs = recorded["scores"][method]
    assert list(circuit.scores) == list(theirs)  # the same edges, named and ordered as the library's graph
    ours, expected = np.array(list(circuit.scores.values())), np.array(list(theirs.values()))
    np.testing.assert_allclose(ours, expected, rtol=RTOL, atol=1e-5 * np.abs(expected).max())
    assert len(ours) == 262  # 3 layers of 4 heads: the library's count


def test_evaluate_of_the_librarys_top_20_circuit_is_its_evaluate_graph(found) -> None:
    family, _, circuits = found
    top = REFERENCE["models"][family]["evaluate"]["top"]
    circuit = circuits["EAP-IG"]
    assert sorted(circuit.top(top["n"])) == sorted(top["edges"])  # the same circuit, pruned as the library prunes
    assert circuit.evaluate(top["edges"]) == pytest.approx(top["value"], rel=RTOL)


def test_evaluate_of_every_edge_removed_alone_is_its_evaluate_graph(found) -> None:
    """The library's `exact` scores: evaluate_graph of the whole graph but one edge, minus the clean run's value."""
    family, _, circuits = found
    recorded = REFERENCE["models"][family]
    circuit = circuits["EAP"]
    edges = list(circuit.scores)
    ours = circuit.evaluate_many([[edge for edge in edges if edge != removed] for removed in edges])
    theirs = np.array([recorded["exact"][edge] for edge in edges]) + recorded["clean"]
    np.testing.assert_allclose(ours, theirs, rtol=RTOL)
    assert np.abs(ours - circuit.clean).max() > 0.1  # some edge matters: the sweep is no constant


def test_top_n_circuits_evaluate_as_the_librarys(found) -> None:
    """The curve's circuits, chosen from the library's scores (so that a near tie cannot choose another edge)."""
    family, _, circuits = found
    recorded = REFERENCE["models"][family]
    circuit = circuits["EAP-IG"]
    graph = circuit.graph
    scores = np.array([recorded["scores"]["EAP-IG"][edge] for edge in graph.edges])
    ns = [int(n) for n in recorded["evaluate"]["curve"]]
    ours = circuit.evaluate_many([graph.names(graph.top_n(scores, n)) for n in ns])
    np.testing.assert_allclose(ours, [recorded["evaluate"]["curve"][str(n)] for n in ns], rtol=RTOL)


def test_the_faithfulness_curve_runs_from_the_corrupted_run_to_the_clean_one(found) -> None:
    _, _, circuits = found
    circuit = circuits["EAP-IG"]
    every = len(circuit.scores)
    curve = circuit.faithfulness([0, 20, every])
    assert curve[0] == 0.0 and curve[-1] == 1.0  # exactly: no edge is the corrupted run, every edge the clean one
    value = circuit.evaluate(circuit.top(20))
    assert curve[1] == pytest.approx((value - circuit.corrupted) / (circuit.clean - circuit.corrupted))
