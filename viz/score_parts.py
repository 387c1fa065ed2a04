"""Figures of one attention score taken apart ("Why here?"): each side's parts as bars (the query side: what each
part wrote at the query; the key side: at the key), the pairs of the largest parts as a matrix, and a whole row's
key side as a (parts, keys) matrix. Pure: names and numbers in, figures out; red adds to the score, blue takes away."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attention_atlas.viz.tokens import plotly_label, plotly_text

RED, BLUE = "#c0392b", "#2c6fbb"  # a part that adds to the score, one that takes away


def largest(names: Sequence[str], shares: np.ndarray, top: int) -> tuple[list[str], np.ndarray]:
    """The `top` parts by the size of their share, the largest first: (names, (top,) shares)."""
    order = np.argsort(-np.abs(shares), kind="stable")[:top]
    return [names[int(i)] for i in order], shares[order]


def sides_figure(query: tuple[Sequence[str], np.ndarray], key: tuple[Sequence[str], np.ndarray], score: float,
                 title: str, top: int = 10) -> go.Figure:
    """Two bar charts side by side: each side's `top` parts (name, share), the largest first, each side's shares
    adding up (with every part left out) to `score`."""
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.22, subplot_titles=(
        "query side: what each part wrote at the query", "key side: what each part wrote at the key"))
    for col, (names, shares) in enumerate((query, key), start=1):
        shown, values = largest(names, np.asarray(shares, np.float64), top)
        figure.add_trace(go.Bar(
            x=values, y=[plotly_text(n) for n in shown], orientation="h", showlegend=False,
            marker={"color": [RED if v >= 0 else BLUE for v in values]},
            hovertemplate="%{y}: %{x:+.4g}" + f" of the score {score:+.4g}<extra></extra>"), row=1, col=col)
        figure.update_yaxes(autorange="reversed", type="category", automargin=True, row=1, col=col)
        figure.update_xaxes(title={"text": "share of the score"}, zeroline=True, zerolinecolor="#888", row=1, col=col)
    figure.update_layout(title={"text": plotly_text(title), "x": 0, "xanchor": "left"},
                         height=max(300, 120 + 24 * top), margin={"l": 60, "r": 20, "t": 80, "b": 50})
    return figure


def pairs_figure(query_names: Sequence[str], key_names: Sequence[str], pairs: np.ndarray, title: str) -> go.Figure:
    """pairs (query parts, key parts): each pair's product, rows the query side's parts, columns the key side's."""
    reach = float(np.abs(pairs).max()) or 1.0
    return go.Figure({"data": [{
        "type": "heatmap", "z": pairs.astype(np.float64), "x": [plotly_text(n) for n in key_names],
        "y": [plotly_text(n) for n in query_names], "colorscale": "RdBu", "reversescale": True, "zmin": -reach,
        "zmax": reach, "zmid": 0, "colorbar": {"title": {"text": "share", "side": "right"}},
        "hovertemplate": "query part %{y} · key part %{x}<br>share: %{z:+.4g}<extra></extra>"}],
        "layout": {"title": {"text": plotly_text(title), "x": 0, "xanchor": "left"},
                   "xaxis": {"title": {"text": "key side's part"}, "type": "category", "tickangle": -45},
                   "yaxis": {"title": {"text": "query side's part"}, "type": "category", "autorange": "reversed"},
                   "height": 160 + 26 * len(query_names), "margin": {"l": 60, "r": 20, "t": 50, "b": 80}}})


def row_figure(part_names: Sequence[str], key_tokens: Sequence[str], keys: np.ndarray, shares: np.ndarray,
               pattern: np.ndarray, title: str) -> go.Figure:
    """A whole row's key side: shares (parts, keys), each part's share of each key's score, under the row's
    attention weights (keys,) as bars, so the bright column's parts read straight down."""
    columns = [f"#{k} {plotly_label(t)}" for k, t in zip(keys.tolist(), key_tokens, strict=True)]
    reach = float(np.abs(shares).max()) or 1.0
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.25, 0.75], vertical_spacing=0.04)
    figure.add_trace(go.Bar(x=columns, y=pattern.astype(np.float64), marker={"color": "#555"}, showlegend=False,
                            hovertemplate="%{x}<br>attention weight %{y:.3f}<extra></extra>"), row=1, col=1)
    figure.add_trace(go.Heatmap(
        z=shares.astype(np.float64), x=columns, y=[plotly_text(n) for n in part_names], colorscale="RdBu",
        reversescale=True, zmin=-reach, zmax=reach, zmid=0, colorbar={"title": {"text": "share", "side": "right"}},
        hovertemplate="%{y} at %{x}<br>share of the score: %{z:+.4g}<extra></extra>"), row=2, col=1)
    figure.update_xaxes(type="category", tickangle=-45, row=2, col=1)
    figure.update_yaxes(title={"text": "weight"}, row=1, col=1)
    figure.update_yaxes(type="category", autorange="reversed", automargin=True, row=2, col=1)
    figure.update_layout(title={"text": plotly_text(title), "x": 0, "xanchor": "left"},
                         height=260 + 24 * len(part_names), margin={"l": 60, "r": 20, "t": 50, "b": 80})
    return figure


def clickable_cells(figure: go.Figure, value_name: str, hint: str) -> go.Figure:
    """A heatmap (trace 0) with an invisible marker over each of its cells (trace -1, point index = row x columns +
    column), which a click selects: plotly's heatmaps report no selection. The marker's hover says what the heatmap's
    did, and `hint` (what the click does)."""
    heatmap = figure.data[0]
    rows, cols, z = list(heatmap.y), list(heatmap.x), np.asarray(heatmap.z, dtype=np.float64)
    y, x = np.repeat(np.arange(len(rows)), len(cols)), np.tile(np.arange(len(cols)), len(rows))
    figure.add_trace(go.Scatter(
        x=[cols[j] for j in x], y=[rows[i] for i in y], mode="markers", showlegend=False,
        marker={"symbol": "square", "size": 12, "color": "rgba(0,0,0,0)"}, customdata=z.reshape(-1, 1),
        hovertemplate="%{y} → %{x}<br>" + plotly_text(value_name) + " %{customdata[0]:.3f}<br>" + plotly_text(hint)
                      + "<extra></extra>"))
    return figure
