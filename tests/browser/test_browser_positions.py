"""The Positional encoding page in a real browser: it draws, a control changes the figure, the waves chart draws,
a refused size says why; screenshots at 1280 x 720 (the projector size) under test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app_browser.page import figure, wait_idle
from app_browser.server import ARTIFACTS


def _number(page, label: str, value: int) -> None:
    box = page.get_by_test_id("stMain").get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")
    wait_idle(page)


@pytest.mark.opens("positions", model="toy-date", text="may 1 2000")
def test_positions_page_draws_and_follows_its_controls(page) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    expect(page.get_by_role("heading", name="Positional encoding", exact=True)).to_be_visible()
    table = figure(page, "sinusoid ·")
    expect(table.locator(".gtitle")).to_have_text("sinusoid · 11 positions × d_model 64")
    page.screenshot(path=str(ARTIFACTS / "positions.png"))
    rows_before = table.first.evaluate("gd => gd._fullData[0].z.length")
    _number(page, "Length (positions)", 48)
    expect(figure(page, "sinusoid ·").locator(".gtitle")).to_have_text("sinusoid · 48 positions × d_model 64")
    assert figure(page, "sinusoid ·").first.evaluate("gd => gd._fullData[0].z.length") == 48 != rows_before
    page.screenshot(path=str(ARTIFACTS / "positions-48.png"))
    page.get_by_role("tab", name="Waves").click()
    expect(page.locator("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg").first
           ).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "positions-waves.png"))
    page.get_by_role("tab", name="Shift = rotation").click()
    expect(page.get_by_text("max |R(k) PE(pos) − PE(pos+k)|")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "positions-shift.png"))
    page.get_by_role("tab", name="This model").click()
    expect(figure(page, "this model · rows 0–47")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "positions-model.png"), full_page=True)
    page.get_by_role("tab", name="Your tokens").click()
    expect(figure(page, "encoder · sum")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "positions-tokens.png"))
    _number(page, "d_model", 7)
    page.get_by_role("tab", name="Sinusoid").click()
    expect(page.get_by_text("d_model must be even (7 is odd)")).to_be_visible()
    assert page.console_errors == []


@pytest.mark.opens("positions", model="smollm2")
def test_a_rotary_model_shows_its_frequencies_and_similarity_draws(page) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.get_by_role("tab", name="Similarity").click()
    expect(figure(page, "sinusoid · dot product of positions")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "positions-similarity.png"))
    page.get_by_role("tab", name="This model").click()
    expect(page.get_by_text("base = 100000, rotated dimensions r = 64")).to_be_visible()
    expect(page.locator("[data-testid='stVegaLiteChart']")).to_have_count(2)
    page.get_by_test_id("stVegaLiteChart").first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "positions-rotary.png"))
    page.get_by_role("tab", name="Your tokens").click()
    expect(page.get_by_text("adds no positional vector")).to_be_visible()
    assert page.console_errors == []
