"""The pure figure and statistics functions."""

import json

import numpy as np
import plotly.io as pio

from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.viz.heatmap import attention_heatmap, layer_head_heatmap, similarity_heatmap
from attention_atlas.viz.outputs import model_card, next_token_bars
from attention_atlas.viz.thumbnails import GAP, TOP, head_at, masked_pixels, resample, thumbnail_figure, thumbnail_grid
from attention_atlas.viz.tokens import plotly_label, visible_token


def test_resample_shrinks_by_block_means_and_grows_by_repeating() -> None:
    m = np.arange(16, dtype=float).reshape(4, 4)
    assert resample(m, 2).tolist() == [[2.5, 4.5], [10.5, 12.5]]
    assert resample(np.array([[1.0, 2.0], [3.0, 4.0]]), 4)[:, 0].tolist() == [1, 1, 3, 3]
    assert resample(np.ones((700, 5)), 40).shape == (40, 40)


def test_masked_pixels_are_those_whose_every_cell_is_masked() -> None:
    """The same pixels as the block means of the mask (`resample`) being 0, shrinking (evenly or not) or growing."""
    rng = np.random.default_rng(0)
    for shape, size in (((64, 64), 8), ((50, 37), 8), ((5, 7), 12), ((300, 300), 64)):
        for visible in (rng.random(shape) < 0.05, np.tril(np.ones(shape, dtype=bool)), np.ones(shape, dtype=bool)):
            expected = resample(visible, size) == 0
            np.testing.assert_array_equal(masked_pixels(visible, size), expected)
    assert masked_pixels(np.tril(np.ones((64, 64), dtype=bool)), 8)[0, 7]  # a causal mask's corner


def test_thumbnail_grid_is_one_small_image() -> None:
    layers = [np.random.default_rng(i).dirichlet(np.ones(512), size=(9, 512)) for i in range(30)]
    image = thumbnail_grid(layers, size=64)  # SmolLM2's size in the model view
    assert image.shape == (30 * (64 + GAP), 9 * (64 + GAP)) and image.dtype == np.uint8
    assert image[:64, :64].max() == TOP  # each head scaled to its own maximum
    payload = len(pio.to_json(thumbnail_figure(image, 64)))
    assert payload < 1_500_000, payload  # 270 heads at 512 tokens: full heatmaps would be ~250 MB
    assert np.array_equal(thumbnail_grid(iter(layers), size=64), image)  # a generator: one layer held at a time


def test_heatmap_labels_are_escaped_and_repeated_tokens_kept_apart() -> None:
    fig = attention_heatmap(np.eye(3), ["l", "l", "<b>"], ["l", "l", "<b>"])
    spec = json.loads(pio.to_json(fig))
    assert spec["layout"]["xaxis"]["ticktext"] == ["l", "l", "&lt;b&gt;"]
    assert spec["layout"]["xaxis"]["tickvals"] == ["#0 l", "#1 l", "#2 &lt;b&gt;"]  # one category per position
    assert spec["data"][0]["y"] == spec["data"][0]["x"]
    assert visible_token(" ") == "·" and plotly_label("") == "∅"
    shown = attention_heatmap(np.eye(2), ["b", "c"], ["b", "c"], row_positions=[1, 2], col_positions=[1, 2])
    assert shown.data[0].x == ("#1 b", "#2 c")  # the positions of a matrix with rows left out


def test_one_head_at_2048_tokens_is_sent_as_the_matrix_and_two_label_lists() -> None:
    n = 2048
    weights = np.tril(np.random.default_rng(0).random((n, n), dtype=np.float32))
    fig = attention_heatmap(weights, [f"t{i}" for i in range(n)], [f"t{i}" for i in range(n)], show_values=True)
    payload = len(pio.to_json(fig))
    assert payload < 1.6 * 4 * n * n, payload  # the float32 matrix in escaped base64; q x k hover strings: ~150 MB
    assert "tickvals" not in fig.layout.xaxis.to_plotly_json()  # plotly thins 2048 labels itself
    assert fig.data[0].texttemplate is None  # too many cells to write values in


def test_show_values_and_colour_scale() -> None:
    fig = attention_heatmap(np.full((2, 2), 0.5), ["a", "b"], ["a", "b"], show_values=True, colorscale="Greys")
    assert fig.data[0].texttemplate == "%{z:.2f}"
    assert fig.data[0].colorscale[-1][1] == "rgb(0,0,0)"  # black = most attention


def test_thumbnail_markers_name_their_head() -> None:
    image = thumbnail_grid([np.random.default_rng(i).dirichlet(np.ones(5), size=(3, 5)) for i in range(2)], 10)
    markers = thumbnail_figure(image, 10).data[1]
    assert len(markers.x) == 2 * 3
    for index, (layer, head) in enumerate(markers.customdata):
        assert head_at(index, heads=3) == (layer, head)
        assert (markers.x[index], markers.y[index]) == (head * (10 + GAP) + 5, layer * (10 + GAP) + 5)


def test_next_token_bars_and_similarity() -> None:
    fig = next_token_bars(["<b>", " Paris"], np.array([0.7, 0.2]))
    spec = json.loads(pio.to_json(fig))
    assert spec["layout"]["yaxis"]["ticktext"] == ["&lt;b&gt;", "·Paris"]
    assert spec["data"][0]["text"] == ["70.0%", "20.0%"]
    sim = json.loads(pio.to_json(similarity_heatmap(np.eye(2), ["a", "b"])))
    assert (sim["data"][0]["zmin"], sim["data"][0]["zmax"]) == (-1.0, 1.0)


def test_model_card_reads_the_facts() -> None:
    facts = ModelFacts("m", "fam", "decoder", 0, 30, 9, 3, 576, 1536, 49152, 2048, "rotary", "pre-norm",
                       134_515_008, "cpu", {"source": "/x"})
    card = model_card(facts)
    assert card.loc["encoder layers", "value"] == "—"
    assert card.loc["parameters", "value"] == "134,515,008"
    assert card.loc["source", "value"] == "/x"


def test_layer_head_heatmap_spans_the_values_and_skips_missing_ones() -> None:
    values = np.array([[0.5, 2.0], [np.nan, 1.0]])
    spec = json.loads(pio.to_json(layer_head_heatmap(values, "entropy (bits)", "t")))["data"][0]
    assert (spec["zmin"], spec["zmax"]) == (0.5, 2.0)
    assert "layer %{y} · head %{x}" in spec["hovertemplate"]


def test_token_labels_escape_markup_but_keep_quotes_readable() -> None:
    from attention_atlas.viz.tokens import plotly_label

    assert plotly_label('."') == '."'  # plotly shows &quot; literally: quotes stay as they are
    assert plotly_label("<b>&") == "&lt;b&gt;&amp;"
