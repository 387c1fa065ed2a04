"""A hybrid in the app (a tiny Qwen3.5: gated delta-net layers 0 and 2, softmax attention layers 1 and 3, tests/
tiny_hybrids.py): the Overview's model card names the layer map, and every page and view opens on its two attention
layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.app_session import CUSTOM, TABBED, assert_ok, open_app_page
from tests.tiny_hybrids import build_hybrid

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_hybrid("qwen3_5_text", tmp_path_factory.mktemp("hybrid") / "qwen3_5_text")


def test_the_overview_names_the_layer_map(folder) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    assert_ok(at, "overview")
    card = at.table[0].value["value"].to_dict()  # the card's values by their names
    assert card["decoder layers"] == "2"
    assert card["layer map"] == ("layers 0, 2: gated delta-net (linear attention); layers 1, 3: softmax attention "
                                 "(shown as attention layers 0–1, of 4 layers)")


@pytest.mark.parametrize("page", TABBED)
def test_every_view_opens(folder, page: str) -> None:
    at = open_app_page(page, folder=str(folder), text=TEXT)
    assert_ok(at, page)
    views = [tab.label for tab in at.tabs]
    assert len(views) >= (4 if page == "app_pages/step_through.py" else 6), page
    for view in views:
        at.session_state[TABBED[page]] = view
        at.run()
        assert_ok(at, f"{page} · {view}")


def test_the_other_pages_open(folder) -> None:
    """Generation (with a step), ablation, and attribution, which splits a hybrid's logit with its other blocks."""
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    for page in ("app_pages/generate.py", "app_pages/ablation.py", "app_pages/tour.py"):
        at.switch_page(page).run()
        assert_ok(at, page)
    at.switch_page("app_pages/attribution.py").run()  # its delta-net blocks are parts of the split
    assert_ok(at, "app_pages/attribution.py")
    at.switch_page("app_pages/generate.py").run()
    if "generate_step" in [button.key for button in at.button]:
        at.button(key="generate_step").click().run()
        assert_ok(at, "a generated step")


def test_the_layer_picker_shows_the_true_layer_numbers(folder) -> None:
    at = open_app_page("app_pages/attention.py", folder=str(folder), text=TEXT)
    assert_ok(at, "attention")
    assert at.selectbox(key="layer").options == ["layer 1 (attention layer 0)", "layer 3 (attention layer 1)"]


def test_the_residual_views_read_every_block(folder) -> None:
    """Its residual stream and logit lens have a row for each of its 4 blocks (delta-net or attention), not for its
    2 attention layers only, and a measure kept from another model falls back to this one's first."""
    at = open_app_page("app_pages/activations.py", model_id="toy-gpt-date", text=TEXT)
    at.selectbox(key="activations_residual_measure").set_value("‖attn_out‖: what attention writes").run()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
    assert_ok(at, "residual stream")
    figure = at.get("plotly_chart")[0].proto.spec
    assert '"L0 pre"' in figure and '"L3 post"' in figure
    at.selectbox(key="activations_residual_measure").set_value(
        "‖what each block writes‖ (its output − its input)").run()
    figure = at.get("plotly_chart")[0].proto.spec
    assert '"L0 gated delta-net"' in figure and '"L3 softmax attention"' in figure
    at.session_state["activations_view"] = "Logit lens"
    at.run()
    assert_ok(at, "logit lens")
    lens = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert lens["data"][0]["y"] == [0, 1, 2, 3]
