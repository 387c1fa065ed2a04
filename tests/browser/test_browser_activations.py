"""The Activations page in a real browser: every view draws, a control changes what is drawn, no console
errors; screenshots of each view (also at 1280 x 720) under test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app_browser.page import choose, figure, wait_idle
from app_browser.server import ARTIFACTS

VIEWS = {  # tab -> the title of a figure it draws
    "Residual stream": "‖residual‖ at each boundary",
    "FFN neurons": "on the text",
    "Norms": "what each norm divides by",
    "Logit lens": "logit lens",
    "Trajectories": "token trajectories",
    "Shapes": "the shapes on the arrows",
}


def _shoot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"activations-{name}.png"), full_page=True)


@pytest.mark.opens("activations", model="toy-date", text="may 1 2000")
def test_activations_page_views(page) -> None:
    expect(page.get_by_role("heading", name="Activations", exact=True)).to_be_visible()
    for tab, title in VIEWS.items():
        page.get_by_role("tab", name=tab).click()
        wait_idle(page)
        expect(figure(page, title).first).to_be_visible()
        _shoot(page, tab.lower().replace(" ", "-"))
        for i in range(figure(page, "").count()):  # every figure of the view, whole (the page scrolls inside)
            figure(page, "").nth(i).screenshot(path=str(ARTIFACTS / f"activations-{tab.split()[0].lower()}-{i}.png"))
    page.get_by_role("tab", name="Residual stream").click()
    wait_idle(page)
    choose(page, "Measure", "cosine between consecutive layers")
    expect(figure(page, "encoder: cosine between consecutive layers")).to_be_visible()
    page.get_by_role("tab", name="FFN neurons").click()
    wait_idle(page)
    choose(page, "Layer", "1")
    expect(figure(page, "layer 1 · neuron").first).to_be_visible()
    page.get_by_role("tab", name="Shapes").click()
    wait_idle(page)
    box = page.get_by_test_id("stMain").get_by_label("Filter modules", exact=True)
    box.fill("linear")
    box.press("Enter")
    wait_idle(page)
    expect(page.get_by_text("module calls;")).to_contain_text("of 159 module calls")
    assert page.console_errors == []
    assert page.dialogs == []


@pytest.mark.opens("activations", model="toy-gpt-date")
def test_activations_at_1280_by_720_on_a_causal_lm(page) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    for tab in ("Logit lens", "Trajectories", "FFN neurons"):
        page.get_by_role("tab", name=tab).click()
        wait_idle(page)
        expect(figure(page, VIEWS[tab]).first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / f"activations-1280-{tab.lower().replace(' ', '-')}.png"))
    assert page.console_errors == []
