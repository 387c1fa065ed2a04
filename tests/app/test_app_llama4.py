"""Llama 4 (a chunked layer, a NoPE layer) in the app: every page and view opens, the Masks page draws the chunked
layer's mask with the keys of other chunks hidden by the chunk, the model card and the Positional encoding page name
the NoPE layer, and Step through checks itself in both layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.app_session import assert_ok, open_app_page, open_every_view
from tests.tiny_llama4 import VARIANTS, build_llama4

STEP_QKV = "2 · Q, K, V"  # Step through's tab that says what it applies to Q and K
TEXT = "the cat sat on the mat"  # <s> and six words: chunks 0-2, 3-5, 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_llama4(tmp_path_factory.mktemp("llama4") / "both", **VARIANTS["both"])


def test_the_masks_page_draws_the_chunks(folder) -> None:
    at = open_app_page("app_pages/masks.py", folder=str(folder), text=TEXT)
    assert_ok(at, "masks")
    words = " ".join(m.value for m in at.markdown)
    assert ("**Chunked attention.** Layer 0: each token sees only the tokens of its own chunk of 3 positions (0–2, "
            "3–5, …) up to itself; the other layers see every token before it.") in words
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "mask · decoder self-attention · layer 0 (chunks of 3)" in titles
    counts = [c.value for c in at.caption if "hidden (" in c.value]
    assert counts[-1] == "36 of 49 cells hidden (21 causal, 15 chunk)."  # rows 3-5 hide keys 0-2, row 6 keys 0-5


def test_the_positional_page_and_the_model_card_name_the_nope_layer(folder) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    assert_ok(at, "overview")
    card = " ".join(str(table.value.to_dict()) for table in at.table)
    assert "no positional encoding (NoPE)" in card and "layer 1: q and k are not rotated" in card
    assert "chunked attention" in card and "qk-norm" in card
    at.switch_page("app_pages/positions.py").run()
    at.session_state["positions_view"] = "This model"
    at.run()
    assert_ok(at, "positions · This model")
    words = " ".join(m.value for m in at.markdown)
    assert "**NoPE** · Layer 1: q and k are not rotated" in words and "temperature tuning" in words
    assert "In every rotary layer (see NoPE below)" in words


def test_step_through_checks_itself_in_the_chunked_and_the_nope_layer(folder) -> None:
    """Both layers recomputed from the weights match the model: the chunked rotary layer with its qk-norm, the NoPE
    layer with no rotation and its queries' temperature; the page says what it applied."""
    at = open_app_page("app_pages/step_through.py", folder=str(folder), text=TEXT)
    for layer in (0, 1):
        at.selectbox(key="layer").set_value(layer).run()
        at.session_state["step_view"] = STEP_QKV
        at.run()
        assert_ok(at, f"step through · layer {layer}")
        table = at.table[0].value
        worst = dict(zip(table["step"], map(float, table["max |recomputed − model|"]), strict=True))
        assert worst["scores before the mask"] < 1e-5 and worst["head output Z = A V"] < 1e-5, worst
        assert worst["Concat(heads) W_O + b_O"] < 1e-5 and worst["pattern (softmax)"] < 1e-3, worst
        words = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
        if layer == 0:
            assert "**qk-norm**" in words and "**Rotary positions**" in words and "NoPE" not in words
        else:
            assert "(NoPE)" in words and "**Temperature tuning**" in words and "**Rotary positions**" not in words


def test_every_page_and_view_opens(folder) -> None:
    """Every page and view, a generated step, the scan of every head's ablation and activation patching."""
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    for page in ("app_pages/generate.py", "app_pages/ablation.py", "app_pages/attribution.py"):
        at.switch_page(page).run()
        assert_ok(at, page)
    for page, button in (("app_pages/generate.py", "generate_step"), ("app_pages/ablation.py", "ablation_scan_button"),
                         ("app_pages/attribution.py", "attribution_offer_swap"),
                         ("app_pages/attribution.py", "attribution_patch")):
        at.switch_page(page).run()
        at.button(key=button).click().run()
        assert_ok(at, f"{page} · {button}")
    open_every_view(at)
