"""Step-through figures: shape titles, cut matrices said so, −∞ hatched, colours centred at 0."""

import numpy as np

from attention_atlas.viz.step_through import LIMIT, shape_text, step_heatmap, symmetric_range, truncation_note


def test_a_large_matrix_is_cut_and_said_so() -> None:
    values = np.arange(100 * 7, dtype=np.float64).reshape(100, 7)
    fig = step_heatmap(values, [f"#{i} <b>" for i in range(100)], [f"d{j}" for j in range(7)], "X <i>")
    assert fig.data[0].z.shape == (LIMIT, 7) and fig.data[0].y[0] == "#0 &lt;b&gt;"  # labels escaped
    assert fig.layout.title.text == "X &lt;i&gt;"
    assert truncation_note(values.shape) == (f"Showing the first {LIMIT} of 100 rows; the CSV download has the "
                                             "whole matrix.")
    assert truncation_note((3, 4)) is None
    assert shape_text((3, 4), ("tokens", "d_head")) == "(tokens, d_head) = (3, 4)"


def test_minus_infinity_is_hatched_and_the_scale_is_centred() -> None:
    values = np.array([[1.0, -np.inf], [-3.0, 2.0]])
    fig = step_heatmap(values, ["a", "b"], ["a", "b"], "S + M")
    assert np.isnan(fig.data[0].z[0, 1]) and fig.data[0].z[1, 0] == -3.0
    assert fig.layout.images and fig.data[1].name.startswith("masked")
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-3.0, 3.0) == symmetric_range(values)
    assert not step_heatmap(np.ones((2, 2)), ["a", "b"], ["a", "b"], "A").layout.images


def test_the_csv_has_the_whole_matrix_with_position_headers() -> None:
    from attention_atlas.ui.matrix_view import whole_table
    from attention_atlas.viz.tokens import position_label

    tokens = ["a", "b", "a"] * 30  # repeated tokens stay apart
    names = [position_label(i, t) for i, t in enumerate(tokens)]
    values = np.full((90, 90), -np.inf)
    values[np.tril_indices(90)] = 0.5
    csv = whole_table(values, names, names).to_csv()
    header, first = csv.splitlines()[:2]
    assert header.split(",")[1:4] == ["#0 a", "#1 b", "#2 a"] and len(header.split(",")) == 91
    assert first.split(",")[:3] == ["#0 a", "0.5", "-inf"] and len(csv.splitlines()) == 91
