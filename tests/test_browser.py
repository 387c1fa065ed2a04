"""The app in a real browser: Debian's Chromium driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium, serve_app

pytestmark = pytest.mark.browser
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


@pytest.fixture(scope="module")
def app_url() -> Iterator[str]:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app()


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.console_errors = []
    page.dialogs = []
    page.on("console", lambda msg: msg.type == "error" and page.console_errors.append(msg.text))
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(app_url)
    page.wait_for_selector(IDLE, timeout=60_000)
    yield page
    context.close()


def _set_text(page, text: str) -> None:
    box = page.get_by_label("Text", exact=True)
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=60_000)


def test_type_a_sentence_and_see_the_heatmap(page) -> None:
    _set_text(page, "attention")
    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=30_000)
    assert page.get_by_test_id("stMetricValue").inner_text() == "attention"
    ticks = page.locator(".js-plotly-plot .xtick text").all_inner_texts()
    assert ticks == [*"attention", "</s>"]
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
    assert page.console_errors == []


def test_script_in_text_is_shown_literally_and_never_runs(page) -> None:
    _set_text(page, "<img src=x onerror=alert(1)>")
    alert = page.get_by_test_id("stAlert").first
    assert "does not know" in alert.inner_text()
    page.screenshot(path=str(ARTIFACTS / "bad-input.png"), full_page=True)
    assert page.dialogs == []
    assert page.locator("img[src='x']").count() == 0
