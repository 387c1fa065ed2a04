"""`aa.plot.circuit`: the top-n circuit of a Circuit drawn — its edges exactly `Circuit.top(n)`, each node where its
layer and head put it (the input at the top, each layer's heads on a row, its MLP below them, the logits last)."""

from __future__ import annotations

import pytest

from attention_atlas import plot
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.circuit import find_circuit
from attention_atlas.viz.circuit import WIDEST
from tests.circuit_models import ANSWER, CLEAN, CORRUPTED, WRONG, build_circuit_model


@pytest.fixture(scope="module")
def circuit(tmp_path_factory):
    runner = load_hf_runner(str(build_circuit_model("llama", tmp_path_factory.mktemp("llama"))))
    return find_circuit(runner, CLEAN, CORRUPTED, ANSWER, WRONG)


def test_the_figure_draws_the_top_n_circuit(circuit) -> None:
    fig = plot.circuit(circuit, 30)
    top = circuit.top(30)
    assert 0 < len(top) < 30  # pruned
    drawn = [row[2] for row in fig.data[-1].customdata]
    assert sorted(drawn) == sorted(top)
    widest = max((t for t in fig.data if t.mode == "lines" and t.x[0] is not None), key=lambda t: t.line.width)
    assert widest.line.width == WIDEST
    nodes = {row[0]: (y, x) for row, y, x in zip(fig.data[0].customdata, fig.data[0].y, fig.data[0].x, strict=True)}
    assert set(nodes) == {"input", "logits"} | {node for edge in top for node in edge.split("<")[0].split("->")}
    assert nodes["input"][0] == 0 and nodes["logits"][0] == max(y for y, _ in nodes.values())
    rows = sorted(nodes.items(), key=lambda item: item[1][0])
    layers = [0 if name == "input" else 99 if name == "logits" else int(name[1:].split(".")[0]) for name, _ in rows]
    assert layers == sorted(layers)  # top to bottom, layer by layer
    for name, (row, column) in nodes.items():
        if name.startswith("a"):
            assert column == int(name.split(".h")[1])
            mlp = f"m{name[1:].split('.')[0]}"
            assert mlp not in nodes or nodes[mlp][0] > row  # the MLP below its layer's heads
    assert f"the top 30 edges by |EAP-IG score|, {len(top)} left after pruning" in fig.layout.title.text


def test_no_edge_and_too_many_edges(circuit) -> None:
    assert [row[0] for row in plot.circuit(circuit, 0).data[0].customdata] == ["input", "logits"]
    with pytest.raises(UserError, match="circuit\\(\\) draws 0 to 500 edges, not 501"):
        plot.circuit(circuit, 501)
