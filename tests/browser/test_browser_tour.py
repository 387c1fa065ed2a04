"""The Tour in a real browser: the paper's encoder-decoder walked from its first step to its last with Next, each
step's title shown and its figure (or table) drawn, the step in the address bar, a link reopening a step; nothing
logs an error."""

from __future__ import annotations

from playwright.sync_api import expect

from app_browser.page import choose_model, open_page, screenshots, set_text, wait_idle
from attention_atlas.model.inspect.tour import tour_options, tour_steps
from attention_atlas.model.registry import load_runner

TEXT = "march 3 2021"


def test_the_paper_model_walked_step_by_step(page) -> None:
    runner = load_runner("toy-date")
    steps = tour_steps(runner.run(TEXT, None, tour_options(runner.facts)))
    choose_model(page, "toy-date")
    set_text(page, TEXT)
    open_page(page, "Tour")
    main = page.get_by_test_id("stMain")
    for index, step in enumerate(steps):
        expect(main.get_by_role("heading", name=step.title, exact=True)).to_be_visible()
        drawn = main.get_by_test_id("stPlotlyChart").or_(main.get_by_test_id("stDataFrame"))
        if step.kind != "text":
            expect(drawn.first).to_be_visible()
        assert f"step={index}" in page.url
        if step.key == "encoder.softmax":
            screenshots(page, "tour-toy-date")
        if index < len(steps) - 1:
            main.get_by_role("button", name="Next", exact=True).click()
            wait_idle(page)
    expect(main.get_by_role("button", name="Next", exact=True)).to_be_disabled()
    expect(main.get_by_text("The output: ", exact=False)).to_be_visible()
    page.goto(page.url.replace(f"step={len(steps) - 1}", "step=4"))  # a shared link: step 5
    wait_idle(page)
    expect(main.get_by_role("heading", name=steps[4].title, exact=True)).to_be_visible()
    assert page.console_errors == []
