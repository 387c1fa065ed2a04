"""Figures of which heads matter: each head's direct share of a logit (a layer x head grid, red adds to the answer,
blue takes away, each cell a click target), each layer's parts side by side, and activation patching's layer x
position grids."""

from __future__ import annotations

import itertools

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text


def head_shares_heatmap(shares: np.ndarray, title: str, measure: str, *, clickable: bool = True,
                        least: float = 0.0) -> go.Figure:
    """shares (layers, heads): each head's value (NaN: none yet), on a scale centred at 0 reaching at least `least`.
    Over each cell lies an invisible marker (trace 1, point index = layer * heads + head) that a click selects
    (`ui.pickers.clicked_head`), its hover saying so where the page opens the head (`clickable`)."""
    layers, heads = shares.shape
    reach = max(least, float(np.nanmax(np.abs(shares))) if np.isfinite(shares).any() else 0.0) or 1.0
    layer_of, head_of = np.divmod(np.arange(layers * heads), heads)
    title, measure = plotly_text(title), plotly_text(measure)
    hover = "layer %{y} · head %{x}<br>" + measure + ": %{z:+.4g}<extra></extra>"
    return go.Figure({  # one dict, validated once
        "data": [
            {"type": "heatmap", "z": shares.astype(np.float64), "x": list(range(heads)), "y": list(range(layers)),
             "colorscale": "RdBu", "reversescale": True, "zmin": -reach, "zmax": reach, "zmid": 0,
             "colorbar": {"title": {"text": measure, "side": "right"}}, "hovertemplate": hover},
            {"type": "scatter", "x": head_of, "y": layer_of, "mode": "markers", "showlegend": False,
             "marker": {"symbol": "square", "size": 14, "color": "rgba(0,0,0,0)"},
             "customdata": shares.reshape(-1, 1).astype(np.float64),
             "hovertemplate": "layer %{y} · head %{x}<br>" + measure + ": %{customdata[0]:+.4g}"
                              + ("<br>click to open" if clickable else "") + "<extra></extra>"},
        ],
        "layout": {
            "title": {"text": title, "x": 0, "xanchor": "left"},
            "xaxis": {"title": {"text": "head"}, "dtick": 1 if heads <= 16 else None, "showgrid": False,
                      "zeroline": False},
            "yaxis": {"title": {"text": "layer"}, "autorange": "reversed", "dtick": 1 if layers <= 16 else None,
                      "showgrid": False, "zeroline": False},
            "height": min(760, 160 + 22 * layers), "clickmode": "event+select",
            "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        },
    })


def layer_shares_bars(parts: dict[str, np.ndarray], title: str, measure: str) -> go.Figure:
    """parts: name -> (layers,) each layer's share of that kind ("attention heads", "MLP" …), bars side by side."""
    title, measure = plotly_text(title), plotly_text(measure)
    parts = {plotly_text(name): values for name, values in parts.items()}
    fig = go.Figure([go.Bar(name=name, x=list(range(len(values))), y=np.asarray(values, np.float64),
                            hovertemplate=f"layer %{{x}} · {name}<br>{measure}: %{{y:+.4g}}<extra></extra>")
                     for name, values in parts.items()])
    fig.update_xaxes(title="layer", dtick=1 if len(next(iter(parts.values()))) <= 32 else None)
    fig.update_yaxes(title=measure, zeroline=True, zerolinecolor="#888")
    fig.update_layout(title=title, barmode="group", height=340, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def block_shares_bars(shares: dict[str, float], title: str, measure: str) -> go.Figure:
    """shares: part name ("block 0 (Mamba)", "L1.rest") -> its direct share, one bar each, red adding, blue taking."""
    names, values = [plotly_text(name) for name in shares], np.array(list(shares.values()), dtype=np.float64)
    title, measure = plotly_text(title), plotly_text(measure)
    fig = go.Figure(go.Bar(x=names, y=values, marker={"color": ["#c0392b" if v >= 0 else "#2471a3" for v in values]},
                           hovertemplate="%{x}<br>" + measure + ": %{y:+.4g}<extra></extra>"))
    fig.update_xaxes(title="part", type="category")
    fig.update_yaxes(title=measure, zeroline=True, zerolinecolor="#888")
    fig.update_layout(title=title, height=320, margin={"l": 60, "r": 20, "t": 50, "b": 80})
    return fig


def patching_heatmap(values: np.ndarray, tokens: list[str], title: str) -> go.Figure:
    """values (layers, positions): how much of the clean run's logit difference each patched activation restores
    (0 = the corrupted run, 1 = the clean run), a column a position labelled by its clean token."""
    layers = len(values)
    labels = [f"{i}: {plotly_label(t)}" for i, t in enumerate(tokens)]
    reach = max(1.0, float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0)
    fig = go.Figure(go.Heatmap(
        z=values.astype(np.float64), x=labels, y=list(range(layers)), colorscale="RdBu", reversescale=True,
        zmin=-reach, zmax=reach, zmid=0, colorbar={"title": {"text": "restored", "side": "right"}},
        hovertemplate="layer %{y} · %{x}<br>restored: %{z:.3f}<extra></extra>"))
    fig.update_xaxes(title="position: the clean token there", tickangle=-45)
    fig.update_yaxes(title="layer", autorange="reversed", dtick=1 if layers <= 16 else None)
    fig.update_layout(title=plotly_text(title), height=min(760, 200 + 22 * layers),
                      margin={"l": 60, "r": 20, "t": 50, "b": 90})
    return fig


SHARE_STEPS = (0.0, 0.1, 0.25, 0.5, 1.0)  # an edge's share, in steps each drawn with one line width
LINE_WIDTHS = (1.5, 3.0, 5.0, 8.0)  # the residual's drawn at half: it is most of most sums
EDGE_SHIFTS = {"mlp": 0.2}  # the MLP's edge drawn beside the residual's (both join a token's node to the next)
EDGE_COLOURS = {"residual": "rgba(150, 150, 150, {a})", "attention": "rgba(31, 119, 180, {a})",
                "mlp": "rgba(255, 127, 14, {a})"}  # drawn in this order: the residual under the others


def contribution_graph_figure(edges: list[tuple[str, int, int, int, float]], tokens: list[str], n_layers: int,
                              clickable: list[tuple[float, float, str]], title: str) -> go.Figure:
    """The routes to a prediction: a column per token, a row per level of the residual stream (2 a layer: after its
    attention, after its MLP), each edge (kind, level, source, target, share) a line wider as its share is larger
    (SHARE_STEPS). Over each attention edge's middle lies a marker (trace 0, in the order of `clickable`: x, y, its
    hover text: plain text, its lines split at newlines) a click selects."""
    hover = ["<br>".join(plotly_text(line) for line in c[2].split("\n")) for c in clickable]
    data: list[dict] = [{"type": "scatter", "x": [c[0] for c in clickable], "y": [c[1] for c in clickable],
                         "mode": "markers", "showlegend": False, "hovertext": hover, "hoverinfo": "text",
                         "marker": {"size": 12, "color": "rgba(0,0,0,0)"}}]
    for kind, colour in EDGE_COLOURS.items():
        for (low, high), width in zip(itertools.pairwise(SHARE_STEPS), LINE_WIDTHS, strict=True):
            chosen = [e for e in edges if e[0] == kind and low < e[4] <= high]
            shift = EDGE_SHIFTS.get(kind, 0.0)
            xs = [x for e in chosen for x in (e[2] + shift, e[3] + shift, None)]
            ys = [y for e in chosen for y in (e[1], e[1] + 1, None)]
            data.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines", "hoverinfo": "skip",
                         "showlegend": False, "line": {"width": width * (0.5 if kind == "residual" else 1.0),
                                                       "color": colour.format(a=0.4 + 0.6 * high)}})
        data.append({"type": "scatter", "x": [None], "y": [None], "mode": "lines", "name": kind,
                     "line": {"width": 4, "color": colour.format(a=1)}})
    levels = 2 * n_layers
    return go.Figure({
        "data": data,
        "layout": {
            "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
            "xaxis": {"tickvals": list(range(len(tokens))), "ticktext": [f"{i}: {plotly_label(t)}"
                                                                       for i, t in enumerate(tokens)],
                      "tickangle": -45, "showgrid": False, "zeroline": False, "title": {"text": "token"}},
            "yaxis": {"tickvals": list(range(0, levels + 1, 2)), "ticktext": [f"into layer {layer}" if layer < n_layers
                                                                            else "output"
                                                                            for layer in range(n_layers + 1)],
                      "showgrid": True, "zeroline": False, "range": [-0.5, levels + 0.5]},
            "height": min(1400, 220 + 26 * levels), "clickmode": "event+select",
            "legend": {"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right"},
            "margin": {"l": 90, "r": 20, "t": 70, "b": 100},
        },
    })
