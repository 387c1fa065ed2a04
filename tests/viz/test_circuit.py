"""The circuit figure (viz/circuit.py): an edge's line as wide as its |score| (the largest WIDEST), red where its
score is below 0 and blue above, solid, dashed or dotted into a head's query, key or value, arriving at the head's
upper left, top or upper right; nodes and edges named in `customdata` for clicks, escaped where plotly shows them."""

from __future__ import annotations

from attention_atlas.viz.circuit import AGAINST, CARRIES, WIDEST, circuit_figure

NODES = [("input", 0.0, 1.5), ("a0.h1", 1.0, 1.0), ("a1.h3", 2.0, 3.0), ("m1", 3.0, 1.5), ("logits", 4.0, 1.5)]
EDGES = [(0, 1, "q", -2.0), (1, 2, "k", 0.5), (1, 2, "v", -1.0), (2, 3, None, 1.0), (3, 4, None, -0.25)]


def test_each_edge_is_drawn_by_its_score_and_the_input_it_enters() -> None:
    fig = circuit_figure(NODES, EDGES, "a <circuit>")
    lines = [t for t in fig.data if t.mode == "lines" and t.x[0] is not None]
    assert len(lines) == len(EDGES)
    by_width = sorted(lines, key=lambda t: t.line.width)  # drawn smallest first: the largest on top
    assert [t.line.width for t in lines] == [t.line.width for t in by_width]
    widest = lines[-1]
    assert widest.line.width == WIDEST and (widest.x[0], widest.y[0]) == (1.5, 0.0)  # input -> a0.h1<q>, |-2|
    assert widest.line.color == CARRIES and widest.line.dash == "solid"
    assert (widest.x[-1], widest.y[-1]) == (1.0 - 0.1, 1.0 - 0.1)  # the head's upper left: its query
    k, v = (next(t for t in lines if t.line.dash == dash) for dash in ("dash", "dot"))
    assert k.line.color == AGAINST and v.line.color == CARRIES
    assert k.x[-1] == 3.0 and v.x[-1] == 3.1 and k.line.width == 1.0 + (WIDEST - 1.0) * 0.25
    assert fig.layout.yaxis.autorange == "reversed"  # the input at the top


def test_nodes_and_edges_are_named_for_clicks_and_escaped_for_hover() -> None:
    fig = circuit_figure(NODES, EDGES, "a <circuit>")
    assert [row[0] for row in fig.data[0].customdata] == [name for name, _, _ in NODES]
    middles = fig.data[-1]
    names = {row[2] for row in middles.customdata}
    assert names == {"input->a0.h1<q>", "a0.h1->a1.h3<k>", "a0.h1->a1.h3<v>", "a1.h3->m1", "m1->logits"}
    assert {row[0] for row in middles.customdata} >= {"input-&gt;a0.h1&lt;q&gt;"}  # plotly would read <q> as a tag
    assert fig.layout.title.text == "a &lt;circuit&gt;"
    assert [t.name for t in fig.data if t.showlegend is not False] == [
        "into a head's query", "into a head's key", "into a head's value", "carries the clean answer (score &lt; 0)",
        "works against it (score &gt; 0)"]


def test_an_edge_down_one_column_arcs_past_the_nodes_on_it() -> None:
    fig = circuit_figure(NODES, EDGES, "")
    down = next(t for t in fig.data if t.mode == "lines" and t.x[0] == 1.5 and t.y[0] == 3.0)  # m1 -> logits
    assert down.x[1] > 1.5 and down.line.shape == "spline"


def test_no_edge_draws_the_nodes_alone() -> None:
    fig = circuit_figure(NODES[:1] + NODES[-1:], [], "nothing left")
    assert len(fig.data[0].x) == 2 and list(fig.data[-1].x) == []
