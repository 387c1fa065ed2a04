"""The Tour in a real browser: the paper's encoder-decoder and SmolLM2 walked from the first step to the last with the
right arrow key (and back with the left), each step's title shown and its figure (or table) drawn, the step in the
address bar, a click on the diagram jumping to its step, a link reopening a step, presenter mode at a projector's two
sizes, a guess revealed; nothing logs an error."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from app_browser.page import wait_idle
from app_browser.server import ARTIFACTS
from attention_atlas.model.inspect.tour import tour_options, tour_steps
from attention_atlas.model.registry import load_runner

TEXT = "march 3 2021"


def _walk(page, model_id: str, text: str) -> list:
    """Walk every step of the Tour (the page open on the model and text: the test's `opens` link) with the right
    arrow key; the steps."""
    runner = load_runner(model_id)
    steps = tour_steps(runner.run(text, None, tour_options(runner.facts)))
    main = page.get_by_test_id("stMain")
    for index, step in enumerate(steps):
        expect(main.get_by_role("heading", name=step.title, exact=True)).to_be_visible()
        if step.kind == "tokens":
            expect(main.get_by_test_id("stDataFrame")).to_be_visible()
        else:  # the diagram, and the step's figure where it has one
            expect(main.get_by_test_id("stPlotlyChart")).to_have_count(1 if step.kind == "text" else 2)
        expect(page).to_have_url(re.compile(rf"[?&]step={index}(&|$)"))
        if index < len(steps) - 1:
            main.get_by_role("heading", name=step.title, exact=True).click()  # the page, not a text box, has the keys
            page.keyboard.press("ArrowRight")
            wait_idle(page)
    expect(main.get_by_role("button", name="Next Shortcut →", exact=True)).to_be_disabled()
    page.keyboard.press("ArrowLeft")
    wait_idle(page)
    expect(main.get_by_role("heading", name=steps[-2].title, exact=True)).to_be_visible()
    return steps


@pytest.mark.opens("tour", model="toy-date", text=TEXT)
def test_the_paper_model_walked_with_the_arrow_keys_and_presented(page) -> None:
    steps = _walk(page, "toy-date", TEXT)
    main = page.get_by_test_id("stMain")
    cross = [step.key for step in steps].index("decoder.cross")  # a click on the diagram jumps there
    diagram = main.get_by_test_id("stPlotlyChart").first
    diagram.locator(".scatterlayer .trace").last.locator(".point").nth(cross).click(force=True)
    wait_idle(page)
    expect(main.get_by_role("heading", name=steps[cross].title, exact=True)).to_be_visible()
    expect(page).to_have_url(re.compile(rf"[?&]step={cross}(&|$)"))
    expect(page.get_by_test_id("stSidebar")).to_be_visible()
    page.goto(page.url.replace(f"step={cross}", "step=7") + "&present=1")  # a shared link, presenting
    wait_idle(page)
    expect(main.get_by_role("heading", name=steps[7].title, exact=True)).to_be_visible()
    expect(page.get_by_test_id("stSidebar")).to_be_hidden()
    for width, height in ((1280, 720), (1920, 1080)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / f"tour-presenter-{width}.png"))
    main.get_by_text("Predict", exact=True).click()  # the question before the pattern
    wait_idle(page)
    expect(main.get_by_test_id("stPlotlyChart")).to_have_count(1)  # the diagram alone
    main.get_by_label("Your answer", exact=True).click()
    page.get_by_role("option").first.click()
    wait_idle(page)
    main.get_by_role("button", name="Reveal", exact=True).click()
    wait_idle(page)
    expect(main.get_by_text("The answer: ", exact=False)).to_be_visible()
    expect(main.get_by_test_id("stPlotlyChart")).to_have_count(2)
    page.screenshot(path=str(ARTIFACTS / "tour-predicted-1920.png"))
    assert page.console_errors == []


@pytest.mark.opens("tour", model="smollm2", text="The capital of France is")
def test_smollm2_walked_with_the_arrow_keys(page) -> None:
    steps = _walk(page, "smollm2", "The capital of France is")
    assert "Queries and keys rotated" in [step.title for step in steps]
    assert page.console_errors == []
