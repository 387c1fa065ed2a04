"""Every head of a site coloured by the role its statistics name (model/core/trace/head_roles.py: sink, previous
token, induction, self, local, vertical, broad, mixed), a legend entry a role, the share behind the role on hover;
an invisible marker over each cell (trace 1, point index = layer x heads + head) that a click selects. Pure: the
roles and shares in, a figure out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_text

ROLE_COLOURS = {  # told apart with red-green colour blindness too (Okabe & Ito's palette), mixed the quietest
    "sink": "#000000", "previous token": "#E69F00", "induction": "#D55E00", "self": "#56B4E9", "local": "#009E73",
    "vertical": "#CC79A7", "broad": "#0072B2", "mixed": "#DDDDDD"}


def role_grid(roles: np.ndarray, shares: np.ndarray, measures: np.ndarray, title: str,
              layer_names: Sequence[str] | None = None, retrieval: np.ndarray | None = None) -> go.Figure:
    """roles (layers, heads) role names; shares (layers, heads) the measure each role's rule read (NaN for "mixed");
    measures (layers, heads) that measure's name. Rows: layers (named by `layer_names`, default "layer 0", …).
    retrieval (layers, heads): each head's retrieval score, said on hover where it is not NaN."""
    layers, heads = roles.shape
    names = [plotly_text(n) for n in layer_names] if layer_names is not None else [f"layer {i}" for i in range(layers)]
    order = [role for role in ROLE_COLOURS if (roles == role).any()]
    index = np.vectorize(order.index)(roles) if order else np.zeros(roles.shape, int)  # (layers, heads)
    steps = max(len(order), 1)
    scale = [[bound, ROLE_COLOURS[role]] for i, role in enumerate(order) for bound in (i / steps, (i + 1) / steps)]
    hover = np.array([f"{plotly_text(str(role))}<br>{plotly_text(str(measure))}: {share:.2f}" if measure else
                      plotly_text(str(role)) for role, measure, share in zip(roles.reshape(-1), measures.reshape(-1),
                                                                           shares.reshape(-1), strict=True)],
                     dtype=object).reshape(roles.shape)  # (layers, heads): the role, and the share behind it
    if retrieval is not None:
        hover = np.where(np.isnan(retrieval), hover, hover + np.char.mod("<br>retrieval score: %.2f",
                                                                         np.nan_to_num(retrieval)).astype(object))
    layer_of, head_of = np.divmod(np.arange(layers * heads), heads)
    data = [
        {"type": "heatmap", "z": index.astype(np.float64), "x": list(range(heads)), "y": names, "zmin": -0.5,
         "zmax": steps - 0.5, "colorscale": scale or [[0, "#DDDDDD"], [1, "#DDDDDD"]], "showscale": False,
         "customdata": hover, "xgap": 1, "ygap": 1,
         "hovertemplate": "%{y} · head %{x}<br>%{customdata}<extra></extra>"},
        {"type": "scatter", "x": head_of, "y": [names[i] for i in layer_of], "mode": "markers", "showlegend": False,
         "marker": {"symbol": "square", "size": 12, "color": "rgba(0,0,0,0)"}, "customdata": hover.reshape(-1),
         "hovertemplate": "%{y} · head %{x}<br>%{customdata}<br>click to open<extra></extra>"},
    ]
    data += [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": plotly_text(role),
              "marker": {"symbol": "square", "size": 12, "color": ROLE_COLOURS[role]}} for role in order]
    return go.Figure({"data": data, "layout": {
        "title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
        "xaxis": {"title": {"text": "head"}, "dtick": 1 if heads <= 16 else None, "showgrid": False, "zeroline": False},
        "yaxis": {"title": {"text": "layer"}, "type": "category", "autorange": "reversed", "showgrid": False},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "height": min(900, 160 + 22 * layers), "margin": {"l": 60, "r": 20, "t": 80, "b": 40}}})
