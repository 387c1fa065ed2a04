"""The app in a real browser: Debian's Chromium driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium, serve_app

pytestmark = pytest.mark.browser
expect.set_options(timeout=30_000)  # reruns on a loaded 2-core CI machine take seconds
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


@pytest.fixture(scope="module")
def app_url() -> Iterator[str]:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app()


@pytest.fixture(scope="module")
def browser():
    require_chromium()


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
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    expect(box).to_have_count(1)  # after a model change the old model's box lingers until the rerun ends
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=60_000)


def _choose(page, label: str, option: str, in_sidebar: bool = False) -> None:
    """Pick `option` in the selectbox labelled `label` (on the page, or in the sidebar)."""
    scope = page.get_by_test_id("stSidebar") if in_sidebar else page.get_by_test_id("stMain")
    scope.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=60_000)


def test_type_a_sentence_and_see_the_heatmap(page) -> None:
    _set_text(page, "attention")
    expect(page.get_by_test_id("stMetricValue")).to_have_text("attention")
    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=30_000)
    expect(page.locator(".js-plotly-plot .xtick text")).to_have_text([*"attention", "</s>"])  # redrawn
    page.screenshot(path=str(ARTIFACTS / "overview.png"))
    page.locator(".js-plotly-plot").screenshot(path=str(ARTIFACTS / "heatmap.png"))
    assert page.console_errors == []


def test_switch_model_site_layer_and_head(page) -> None:
    _choose(page, "Model", "toy-date", in_sidebar=True)
    expect(page.get_by_role("heading", name="toy-date")).to_be_visible()
    _set_text(page, "march 3 2021")
    expect(page.get_by_test_id("stMetricValue")).to_have_text("2021-03-03")
    page.get_by_text("decoder.cross_attn", exact=True).click()
    page.wait_for_selector(IDLE, timeout=60_000)
    _choose(page, "Layer", "1")
    _choose(page, "Head", "2")
    expect(page.locator(".js-plotly-plot .gtitle")).to_have_text("decoder.cross_attn · layer 1 · head 2")
    expect(page.locator(".js-plotly-plot .ytick text")).to_have_text(["<s>", *"2021-03-03"])
    page.locator(".js-plotly-plot").screenshot(path=str(ARTIFACTS / "cross-attention.png"))
    assert page.console_errors == []


def test_script_in_text_is_shown_literally_and_never_runs(page) -> None:
    _set_text(page, "<img src=x onerror=alert(1)>")
    expect(page.get_by_test_id("stAlert").first).to_contain_text("does not know: '<', '='")
    page.screenshot(path=str(ARTIFACTS / "bad-input.png"))
    assert page.dialogs == []
    assert page.locator("img[src='x']").count() == 0


def test_attention_page_views(page) -> None:
    page.get_by_test_id("stSidebarNavLink").filter(has_text="Attention").click()
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible()
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(page.locator(".js-plotly-plot .gtitle").first).to_have_text("encoder self-attention · layer 0 · head 0")
    _choose(page, "Head", "3")
    expect(page.locator(".js-plotly-plot .gtitle").first).to_have_text("encoder self-attention · layer 0 · head 3")
    page.get_by_role("tab", name="Model view").click()
    model_view = page.locator(".js-plotly-plot").filter(has_text="layers × heads")
    expect(model_view).to_be_visible()
    model_view.screenshot(path=str(ARTIFACTS / "model-view.png"))
    page.get_by_role("tab", name="Head statistics").click()
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    assert page.console_errors == []
