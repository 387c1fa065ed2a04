"""Figures of which heads matter: each head's direct share of a logit (a layer x head grid, red adds to the answer,
blue takes away, each cell a click target), each layer's parts side by side, and activation patching's layer x
position grids."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label


def head_shares_heatmap(shares: np.ndarray, title: str, measure: str) -> go.Figure:
    """shares (layers, heads): each head's direct share, on a scale centred at 0. Over each cell lies an invisible
    marker (trace 1, point index = layer * heads + head) that a click selects (`ui.pickers.clicked_head`)."""
    layers, heads = shares.shape
    reach = float(np.abs(shares).max()) or 1.0
    layer_of, head_of = np.divmod(np.arange(layers * heads), heads)
    hover = "layer %{y} · head %{x}<br>" + measure + ": %{z:+.4g}<extra></extra>"
    return go.Figure({  # one dict, validated once
        "data": [
            {"type": "heatmap", "z": shares.astype(np.float64), "x": list(range(heads)), "y": list(range(layers)),
             "colorscale": "RdBu", "reversescale": True, "zmin": -reach, "zmax": reach, "zmid": 0,
             "colorbar": {"title": {"text": measure, "side": "right"}}, "hovertemplate": hover},
            {"type": "scatter", "x": head_of, "y": layer_of, "mode": "markers", "showlegend": False,
             "marker": {"symbol": "square", "size": 14, "color": "rgba(0,0,0,0)"},
             "customdata": shares.reshape(-1, 1).astype(np.float64),
             "hovertemplate": "layer %{y} · head %{x}<br>" + measure + ": %{customdata[0]:+.4g}<br>click to open"
                              "<extra></extra>"},
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
    fig = go.Figure([go.Bar(name=name, x=list(range(len(values))), y=np.asarray(values, np.float64),
                            hovertemplate=f"layer %{{x}} · {name}<br>{measure}: %{{y:+.4g}}<extra></extra>")
                     for name, values in parts.items()])
    fig.update_xaxes(title="layer", dtick=1 if len(next(iter(parts.values()))) <= 32 else None)
    fig.update_yaxes(title=measure, zeroline=True, zerolinecolor="#888")
    fig.update_layout(title=title, barmode="group", height=340, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.25})
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
    fig.update_layout(title=title, height=min(760, 200 + 22 * layers), margin={"l": 60, "r": 20, "t": 50, "b": 90})
    return fig
