"""The contribution graph (model/inspect/contributions.py): each part's share of a sum as its proximity to it, the
heads' parts adding up to what attention writes, every node of the graph on a route to the prediction, and the models
whose stream is not attention's sum then the MLP's refused with their reason."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import attention_atlas as aa
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.contributions import EPS, contribution_graph, contribution_options, shares
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import build, build_type

TEXT = "the quick brown fox saw the lazy dog"


def test_a_parts_share_is_its_proximity_to_the_sum() -> None:
    whole = np.array([1.0, 2.0, -1.0])
    parts = np.array([[1.0, 2.0, -1.0], [0.0, 0.0, 0.0], [0.5, 1.0, -0.5]])
    proximity = np.array([4.0, EPS, 4.0 - 2.0])  # ‖whole‖₁ − ‖whole − part‖₁, at least EPS
    np.testing.assert_allclose(shares(parts, whole), proximity / proximity.sum())


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_every_sum_splits_into_shares_of_one_and_every_edge_leads_to_the_prediction(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    trace = runner.run(TEXT, options=contribution_options())
    whole = contribution_graph(runner, trace, threshold=0.0)  # every part of every sum reached
    into: dict[tuple[int, int], float] = defaultdict(float)
    for edge in whole.edges:
        into[(edge.level + 1, edge.target)] += edge.weight
        if edge.kind == "attention":
            assert edge.weight == pytest.approx(sum(edge.heads)) and edge.heads[edge.head] == max(edge.heads)
    assert all(total == pytest.approx(1.0) for total in into.values())
    graph = contribution_graph(runner, trace, position=-1, threshold=0.1)
    top, last = 2 * runner.facts.n_decoder_layers, len(trace.ids) - 1
    targets = {(edge.level + 1, edge.target) for edge in graph.edges}
    for edge in graph.edges:
        assert edge.weight > 0.1
        assert (edge.level + 1, edge.target) == (top, last) or (edge.level + 2, edge.target) in {
            (level + 1, target) for level, target in targets}  # its target node is a source of an edge above
    assert any(edge.level == top - 1 and edge.target == last for edge in graph.edges)  # the route starts there
    sources = {e.source for e in whole.edges if e.kind == "attention" and (e.level, e.target) == (top - 2, last)}
    assert sources == set(range(last + 1))  # the last layer's attention reads every token up to the prediction


def test_models_whose_stream_is_not_attention_then_mlp_are_refused(tmp_path) -> None:
    toy = load_runner("toy-gpt-date")
    with pytest.raises(UserError, match="a norm after each block"):
        contribution_graph(toy, toy.run("march 3 2021", None, contribution_options()))
    parallel = load_hf_runner(str(build_type("gpt_neox", tmp_path / "neox")))
    with pytest.raises(UserError, match="both side by side"):
        contribution_graph(parallel, parallel.run(TEXT, options=contribution_options()))
    gemma2 = load_hf_runner(str(build_type("gemma2", tmp_path / "gemma2")))
    with pytest.raises(UserError, match="do not add up"):
        contribution_graph(gemma2, gemma2.run(TEXT, options=contribution_options()))
    encoder = load_hf_runner(str(build("bert", tmp_path / "bert")))
    with pytest.raises(UserError, match="is an encoder"):
        contribution_graph(encoder, encoder.run(TEXT, options=contribution_options()))


def test_the_api(tmp_path) -> None:
    folder = build("llama", tmp_path / "llama")
    graph = aa.load(str(folder)).contributions(TEXT, threshold=0.05)
    runner = load_hf_runner(str(folder))
    expected = contribution_graph(runner, runner.run(TEXT, options=contribution_options()), -1, 0.05)
    assert graph.edges == expected.edges and graph.position == len(graph.tokens) - 1
