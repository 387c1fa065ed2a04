"""The Train page's charts: a long curve is drawn as means of consecutive steps, and its title says so."""

import numpy as np

from attention_atlas.viz.training import averaged, curve_chart


def test_a_long_curve_is_averaged_and_says_so() -> None:
    steps, means, width = averaged(np.arange(1, 1201, dtype=float), most=500)  # values 1..1200 at steps 1..1200
    assert width == 3 and len(steps) == 400
    assert steps[0] == 3 and means[0] == 2.0 and steps[-1] == 1200 and means[-1] == 1199.0
    long = curve_chart("loss", np.arange(1200.0), marked=600, steps=1200).to_dict()
    assert long["layer"][0]["title"] == {"text": "loss", "subtitle": "means of 3 steps"}
    short = curve_chart("loss", np.arange(100.0), marked=None, steps=100).to_dict()
    assert short["title"] == "loss"


def test_an_uneven_last_window_is_the_mean_of_what_it_holds() -> None:
    steps, means, width = averaged([1.0, 2.0, 3.0, 4.0, 5.0], most=2)
    assert width == 3 and list(steps) == [3, 5] and list(means) == [2.0, 4.5]
