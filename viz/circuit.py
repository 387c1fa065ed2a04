"""A circuit drawn as a graph: nodes on rows from the input at the top to the logits at the bottom (each layer's
heads side by side on one row, its MLP on the row below), each edge a line whose width is its |score| and whose
colour its sign — red where corrupting the edge lowers the logit difference (it carries the clean answer: a score
below 0), blue where it raises it — and an edge into a head's query, key or value drawn solid, dashed or dotted, to
the head's upper left, top or upper right. Pure: nodes and edges in, a figure out. For a page that opens what is
clicked, each node's marker (trace 0) carries its name in `customdata`, each edge's midpoint marker (the last trace)
[its name escaped for plotly, its score, its name]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_text

CARRIES, AGAINST = "#c0392b", "#2471a3"  # red: the edge carries the clean answer (score < 0); blue: score > 0
DASHES = {"q": "solid", "k": "dash", "v": "dot", None: "solid"}
ENTRY = {"q": (-0.1, -0.1), "k": (0.0, -0.13), "v": (0.1, -0.1), None: (0.0, 0.0)}  # (column, row) from the node's
# centre where an edge into a head's q, k or v arrives: its upper left, top or upper right
WIDEST = 9.0  # the line of the largest |score|
BEND = 0.12  # columns an edge down one column bends aside, a row it spans


def circuit_figure(nodes: Sequence[tuple[str, float, float]], edges: Sequence[tuple[int, int, str | None, float]],
                   title: str, columns: tuple[float, float] | None = None) -> go.Figure:
    """nodes: (name, row, column) each, row 0 at the top; edges: (source node, destination node, "q"/"k"/"v" or None,
    score) each, by index into `nodes`; columns: the (first, last) column to show (None: the nodes')."""
    reach = max((abs(score) for *_, score in edges), default=0.0) or 1.0
    data: list[dict] = [{
        "type": "scatter", "x": [c for _, _, c in nodes], "y": [r for _, r, _ in nodes], "mode": "markers+text",
        "text": [plotly_text(name) for name, _, _ in nodes], "textposition": "middle right",
        "customdata": [[name] for name, _, _ in nodes], "showlegend": False,
        "marker": {"size": 16, "color": "#f4f4f4", "line": {"color": "#555", "width": 1.5}},
        "hovertemplate": "%{customdata[0]}<extra></extra>"}]
    middles: list[tuple[float, float, str, float]] = []
    for source, destination, letter, score in sorted(edges, key=lambda edge: abs(edge[3])):  # the largest on top
        (name_a, y0, x0), (name_b, y1, x1) = nodes[source], nodes[destination]
        x1, y1 = x1 + ENTRY[letter][0], y1 + ENTRY[letter][1]
        bend = BEND * (y1 - y0) if abs(x1 - x0) < 0.3 else 0.0  # an edge down one column arcs past the nodes on it
        xm, ym = (x0 + x1) / 2 + bend, (y0 + y1) / 2
        data.append({"type": "scatter", "x": [x0, xm, x1], "y": [y0, ym, y1], "mode": "lines", "hoverinfo": "skip",
                     "showlegend": False, "line": {"width": 1.0 + (WIDEST - 1.0) * abs(score) / reach,
                                                   "color": CARRIES if score < 0 else AGAINST,
                                                   "dash": DASHES[letter], "shape": "spline"}})
        edge = f"{name_a}->{name_b}" + (f"<{letter}>" if letter else "")
        middles.append((xm, ym, edge, score))
    data += [_legend_line(f"into a head's {word}", "#777", DASHES[letter]) for letter, word in
             (("q", "query"), ("k", "key"), ("v", "value"))]
    data += [_legend_line("carries the clean answer (score < 0)", CARRIES, "solid"),
             _legend_line("works against it (score > 0)", AGAINST, "solid")]
    data.append({"type": "scatter", "x": [m[0] for m in middles], "y": [m[1] for m in middles], "mode": "markers",
                 "marker": {"size": 8, "color": "rgba(0,0,0,0)"}, "showlegend": False,
                 "customdata": [[plotly_text(m[2]), m[3], m[2]] for m in middles],
                 "hovertemplate": "%{customdata[0]}<br>score %{customdata[1]:+.4g}<extra></extra>"})
    rows = max((r for _, r, _ in nodes), default=0) + 1
    first, last = columns or (min((c for _, _, c in nodes), default=0.0), max((c for _, _, c in nodes), default=0.0))
    return go.Figure({
        "data": data,
        "layout": {
            "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
            "xaxis": {"visible": False, "range": [first - 0.6, last + 1.2]},
            "yaxis": {"visible": False, "autorange": "reversed"},
            "height": int(np.clip(140 + 70 * rows, 320, 1400)), "clickmode": "event+select",
            "legend": {"orientation": "h", "y": -0.04, "yanchor": "top"}, "plot_bgcolor": "rgba(0,0,0,0)",
            "margin": {"l": 20, "r": 20, "t": 50, "b": 80},
        },
    })


def _legend_line(name: str, colour: str, dash: str) -> dict:
    """A legend entry alone: a line with no points."""
    return {"type": "scatter", "x": [None], "y": [None], "mode": "lines", "name": plotly_text(name),
            "line": {"color": colour, "dash": dash, "width": 3}, "hoverinfo": "skip"}


def faithfulness_figure(edges: Sequence[int], values: Sequence[float], chosen: int | None, title: str) -> go.Figure:
    """The faithfulness curve: the logit difference with only the top-n edges carrying the clean run, normalised (0:
    the corrupted run, 1: the clean run), against n on a log axis (n = 0 drawn at the left edge); `chosen` marked."""
    x = np.maximum(np.asarray(edges, dtype=np.float64), 0.5)  # 0 edges at the axis' left end
    data = [{"type": "scatter", "mode": "lines+markers", "x": x, "y": np.asarray(values, dtype=np.float64),
             "customdata": np.asarray(edges), "name": "faithfulness", "showlegend": False,
             "hovertemplate": "top %{customdata} edges<br>faithfulness %{y:.3f}<extra></extra>"}]
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": level, "y1": level,
               "line": {"color": "#888", "width": 1, "dash": "dot"}} for level in (0.0, 1.0)]
    if chosen is not None:
        shapes.append({"type": "line", "yref": "paper", "x0": max(chosen, 0.5), "x1": max(chosen, 0.5), "y0": 0,
                       "y1": 1, "line": {"color": CARRIES, "width": 2}})
    return go.Figure({"data": data, "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"}, "height": 420, "shapes": shapes,
        "xaxis": {"title": {"text": "edges kept (the largest |score| first)"}, "type": "log"},
        "yaxis": {"title": {"text": "faithfulness (0 corrupted, 1 clean)"}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}})
