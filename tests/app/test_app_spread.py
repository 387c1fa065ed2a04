"""A Hugging Face model spread over the devices from the sidebar (Device: spread, and each device's memory
budget): a tiny Llama whose CPU budget holds its first layer, the rest read from the disk, opens on every page and
view, and its model card says where each layer is; a budget that cannot be read gets a message; a toy model is
not offered the choice."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_session import TABBED, assert_ok, open_app_page
from tests.tiny_hf import build

PLAIN = ("app_pages/generate.py", "app_pages/ablation.py")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build("llama", tmp_path_factory.mktemp("spread") / "llama", num_hidden_layers=4)


def _spread(folder: Path, budgets: str) -> AppTest:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text="the cat sat on the mat")
    assert "spread" in at.sidebar.selectbox(key="device").options
    at.sidebar.selectbox(key="device").set_value("spread").run()
    at.sidebar.text_input(key="device_memory").set_value(budgets).run()
    return at


def test_a_spread_model_opens_on_every_page_and_says_where_its_layers_are(folder) -> None:
    at = _spread(folder, "cpu=80000")
    assert_ok(at, "overview")
    card = at.table[0].value["value"].to_dict()  # the card's values by their names
    assert card["device"] == "cpu + disk"
    assert card["where the layers are"].startswith("cpu: model.embed_tokens, model.layers.0 · disk: model.layers.1–3")
    assert card["memory budgets"] == "cpu 78.1 KiB"
    for page in PLAIN:
        at.switch_page(page).run()
        assert_ok(at, page)
    at.switch_page("app_pages/generate.py").run()
    at.button(key="generate_step").click().run()
    assert_ok(at, "a generated step")
    for page, key in TABBED.items():
        at.switch_page(page).run()
        assert_ok(at, page)
        assert at.tabs, page
        for view in [tab.label for tab in at.tabs]:
            at.session_state[key] = view
            at.run()
            assert_ok(at, f"{page} · {view}")


def test_a_budget_that_cannot_be_read_is_named_and_a_toy_model_runs_on_one_device(folder) -> None:
    at = _spread(folder, "cpu=lots")
    assert any("the size must be a number" in error.value for error in at.error)
    at.sidebar.text_input(key="device_memory").set_value("").run()  # no budget: all the memory there is
    assert_ok(at, "no budgets")
    assert at.table[0].value["value"].to_dict()["device"] == "cpu"  # it all fits: one device
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    assert_ok(at, "a toy model after a spread one")
    assert "spread" not in at.sidebar.selectbox(key="device").options
    assert at.sidebar.selectbox(key="device").value == "auto"
