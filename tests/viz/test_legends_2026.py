"""Where the legends of the mask and sink figures sit (found by looking at them in Chromium at 1280 x 720): a mask
figure's legend below the key axis's labels and title, the sink bars with no legend under the chart's buttons."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.viz.ablation import scan_heatmap
from attention_atlas.viz.heatmap import sink_bars
from attention_atlas.viz.masks import mask_figure

AXIS_PX = 60  # the key axis's tick labels and its title "key", below the plot: the legend must start under them


@pytest.mark.parametrize("height", [320, 420, 900])
def test_a_mask_figures_legend_sits_below_the_key_axis_title(height: int) -> None:
    visible = np.tril(np.ones((6, 6), dtype=bool))  # (q_len, k_len)
    fig = mask_figure(visible, {"causal": ~visible}, list("abcdef"), list("abcdef"), "mask", height=height)
    plot = height - fig.layout.margin.t - fig.layout.margin.b  # the plot's height in pixels
    assert fig.layout.legend.yanchor == "top" and -fig.layout.legend.y * plot >= AXIS_PX


def test_the_sink_bars_have_no_legend_beside_the_title() -> None:
    fig = sink_bars(np.array([0.5, 0.25], dtype=np.float32), ["a", "b"], [0, 1], "head 0 · sink")
    assert fig.data[0].name == "sink" and fig.data[0].showlegend is False
    assert fig.layout.xaxis.title.text == "weight on the sink"


def test_the_scan_heatmap_names_a_hybrids_true_layers() -> None:
    """A hybrid's attention layers 0 and 1 are its blocks 1 and 3: the scan's rows and hover say so."""
    effects = np.array([[0.1, 0.5], [0.3, 0.2]])  # (layers, heads)
    figure = scan_heatmap(effects, "scan", "Δ log p", ["layer 1 (attention layer 0)", "layer 3 (attention layer 1)"])
    assert list(figure.data[0].y) == ["layer 1 (attention layer 0)", "layer 3 (attention layer 1)"]
    assert figure.layout.yaxis.type == "category" and figure.data[0].hovertemplate.startswith("%{y} · head %{x}")
    np.testing.assert_array_equal(figure.data[0].z, effects)
    assert list(scan_heatmap(effects, "scan", "Δ").data[0].y) == ["layer 0", "layer 1"]
