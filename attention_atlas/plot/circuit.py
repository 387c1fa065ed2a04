"""A circuit (`Model.circuit`) drawn: its top-n edges, pruned, as a graph from the input at the top through the
layers' heads and MLPs to the logits at the bottom (viz/circuit.py draws it)."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.inspect.circuit import Circuit
from attention_atlas.viz.circuit import circuit_figure

MAX_DRAWN = 500  # edges one figure draws
EDGE = re.compile(r"^(.+)->([^<]+)(?:<([qkv])>)?$")  # "a0.h1->a2.h3<k>": source, destination, the head's input


def layout(node: str, n_heads: int, n_layers: int) -> tuple[int, float]:
    """(row, column) of a node on the full grid: the input's row first, each layer's heads then its MLP, the logits
    last; heads by number, the rest in the middle, between two heads."""
    middle = (n_heads - 1) / 2 + (0.5 if n_heads % 2 else 0.0)
    if node == "input":
        return 0, middle
    if node == "logits":
        return 2 * n_layers + 1, middle
    if node.startswith("m"):
        return 2 * int(node[1:]) + 2, middle
    layer, head = (int(part[1:]) for part in node.split("."))
    return 2 * layer + 1, float(head)


def circuit(circuit: Circuit, n: int = 20) -> go.Figure:
    """The circuit of `circuit`'s `n` edges of largest |score| (`Circuit.top`: pruned of edges that reach neither the
    input nor the logits) as a graph: layers from top to bottom, each head a node, each MLP a node below its layer's
    heads; an edge's width is its |score|, its colour its sign (red: it carries the clean answer, a score below 0;
    blue: above), an edge into a head's query, key or value solid, dashed or dotted. Hover an edge for its score."""
    if not 0 <= n <= MAX_DRAWN:
        raise UserError(f"circuit() draws 0 to {MAX_DRAWN} edges, not {n}: a graph of more is a tangle.")
    edges = circuit.top(n)
    parts = [EDGE.match(edge).groups() for edge in edges]  # type: ignore[union-attr]
    names = ["input", *sorted({node for a, b, _ in parts for node in (a, b)} - {"input", "logits"},
                              key=lambda node: layout(node, circuit.n_heads, circuit.n_layers)), "logits"]
    grid = {name: layout(name, circuit.n_heads, circuit.n_layers) for name in names}
    rows = {row: i for i, row in enumerate(sorted({row for row, _ in grid.values()}))}  # rows with a node only
    nodes = [(name, float(rows[grid[name][0]]), grid[name][1]) for name in names]
    index = {name: i for i, name in enumerate(names)}
    drawn = [(index[a], index[b], letter, circuit.scores[edge]) for (a, b, letter), edge in zip(parts, edges,
                                                                                                strict=True)]
    title = (f"circuit: the top {n} edges by |{circuit.method} score|, {len(edges)} left after pruning · "
             f"logit difference {circuit.answer!r} − {circuit.wrong!r}")
    return circuit_figure(nodes, drawn, title, (0.0, float(circuit.n_heads - 1)))
