"""MPT (ALiBi, attention in its own code, routed through the app's) on every page and view of the app, its ALiBi
drawn on the Masks page apart from the content scores, and on the Positional encoding page per head and distance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_session import LEAST_VIEWS, assert_ok, open_app_page, open_every_view
from tests.app.test_app_model_types import _z
from tests.tiny_hf import build_type

TEXT = "the cat sat on the mat"
PLAIN = ("app_pages/overview.py", "app_pages/generate.py", "app_pages/ablation.py")
SLOPES = 2.0 ** -(8 * np.arange(1, 5) / 4)  # MPT's ALiBi slopes for 4 heads


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_type("mpt", tmp_path_factory.mktemp("mpt_app") / "mpt")


def _figures(at: AppTest) -> dict[str, dict]:
    return {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
            for c in at.get("plotly_chart")}


def test_every_page_and_view_opens(folder) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    for page in PLAIN:
        at.switch_page(page).run()
        assert_ok(at, page)
    at.switch_page("app_pages/generate.py").run()
    at.button(key="generate_step").click().run()
    assert_ok(at, "a generated step")
    open_every_view(at, LEAST_VIEWS)


def test_the_masks_page_draws_its_alibi_apart_from_the_content_scores(folder) -> None:
    """Head 1's bias is its slope (1/16) x (key - query) where the causal mask lets the key be seen, and the scores
    without it plus it are the scores the model computed."""
    at = open_app_page("app_pages/masks.py", folder=str(folder), text=TEXT)
    at.selectbox(key="head").set_value(1).run()
    at.session_state["masks_view"] = "Scores → probabilities"
    at.run()
    assert_ok(at, "MPT masks")
    figures = _figures(at)
    bias, content, scores = (_z(figures[title]) for title in ("B (ALiBi)", "QKᵀ/√d_k (without the bias)",
                                                               "scores QKᵀ/√d_k"))
    n = len(bias)
    visible = np.tril(np.ones((n, n), dtype=bool))
    assert (np.isnan(bias) == ~visible).all()
    expected = SLOPES[1] * np.subtract.outer(np.arange(n), np.arange(n)).T  # slope x (key - query)
    np.testing.assert_allclose(bias[visible], expected[visible], atol=1e-6)
    np.testing.assert_allclose((content + bias)[visible], scores[visible], atol=1e-5)


def test_the_positional_encoding_page_draws_each_heads_slope_times_the_distance(folder) -> None:
    at = open_app_page("app_pages/positions.py", folder=str(folder), text=TEXT)
    at.session_state["positions_view"] = "This model"
    at.run()
    assert_ok(at, "MPT positions")
    text = " ".join(m.value for m in (*at.markdown, *at.caption))
    assert "ALiBi" in text and "MPT" in text
    bias = _z(_figures(at)["relative position bias per head"])  # (heads, 2 len - 1)
    length = (bias.shape[1] + 1) // 2
    np.testing.assert_allclose(bias, SLOPES[:, None] * np.arange(1 - length, length)[None], rtol=1e-6)
