"""A Falcon-H1 whose multipliers are not 1 (attention reads its norm's output × 0.5, its keys × 0.7) in the app: the
Overview's card says pre-norm and names the multipliers, and every tab of Step through opens on each layer with every
step it shows held to the model's own values (it shows its refusal as an error where a step is not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.app_session import assert_ok, open_app_page
from tests.model.test_falcon_h1_multipliers import build_multiplied_falcon_h1

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_multiplied_falcon_h1(tmp_path_factory.mktemp("falcon-h1") / "falcon_h1")


def test_the_card_says_pre_norm_and_the_multipliers(folder) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    assert_ok(at, "overview")
    card = at.table[0].value["value"].to_dict()  # the card's values by their names
    assert card["normalisation"] == "pre-norm (RMSNorm)"
    assert "attention_in_multiplier" in card["scaled inputs"] and "key_multiplier" in card["scaled inputs"]


@pytest.mark.parametrize("layer", [0, 1])
def test_step_through_holds_every_step(folder, layer: int) -> None:
    at = open_app_page("app_pages/step_through.py", folder=str(folder), text=TEXT, params={"layer": str(layer)})
    assert_ok(at, "Step through")
    for view in [tab.label for tab in at.tabs]:
        at.session_state["step_view"] = view
        at.run()
        assert_ok(at, f"Step through · layer {layer} · {view}")
    assert any("Recomputed here from the weights and X" in s.value for s in at.success), [e.value for e in at.error]
