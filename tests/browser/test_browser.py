"""The app in a real browser (Debian's Chromium driven by Playwright): the sidebar, the Overview page,
links that carry the view, and bad input."""

from __future__ import annotations

import re
import urllib.parse

from playwright.sync_api import expect

from app_browser.page import choose, choose_model, figure, set_text, wait_idle
from app_browser.server import ARTIFACTS


def test_type_a_sentence_and_see_the_heatmap(page) -> None:
    choose_model(page, "toy-copy")
    set_text(page, "attention")
    expect(page.get_by_test_id("stCode").first).to_contain_text("attention")
    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=30_000)
    expect(page.locator(".js-plotly-plot .xtick text").first).to_have_text("a")  # redrawn for the new text
    expect(page.locator(".js-plotly-plot").first.locator(".xtick text")).to_have_text([*"attention", "</s>"])
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
    page.locator(".js-plotly-plot").screenshot(path=str(ARTIFACTS / "heatmap.png"))
    assert page.console_errors == []


def test_switch_model_site_layer_and_head(page) -> None:
    choose_model(page, "toy-date")
    set_text(page, "march 3 2021")
    expect(page.get_by_test_id("stCode").first).to_contain_text("2021-03-03")
    page.get_by_text("cross-attention (decoder → encoder)", exact=True).click()
    wait_idle(page)
    choose(page, "Layer", "1")
    choose(page, "Head", "2")
    expect(page.locator(".js-plotly-plot .gtitle").first).to_have_text(
        "cross-attention (decoder → encoder) · layer 1 · head 2")
    expect(page.locator(".js-plotly-plot").first.locator(".ytick text")).to_have_text(["<s>", *"2021-03-03"])
    page.locator(".js-plotly-plot").first.screenshot(path=str(ARTIFACTS / "cross-attention.png"))
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert (query["model"], query["text"], query["layer"], query["head"]) == (["toy-date"], ["march 3 2021"], ["1"],
                                                                              ["2"])
    assert page.console_errors == []


def test_a_copied_link_reopens_the_same_view(page, app_url) -> None:
    query = urllib.parse.urlencode({"model": "toy-date", "text": "may 1 2000", "site": "decoder.cross_attn",
                                    "layer": "1", "head": "3", "view": "One head"})
    page.goto(f"{app_url}/attention?{query}")
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible()
    expect(figure(page, "· head").first.locator(".gtitle")).to_have_text(
        "cross-attention (decoder → encoder) · layer 1 · head 3")
    expect(page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)).to_have_value("may 1 2000")
    page.goto(f"{app_url}/attention?{query.replace('One+head', 'Model+view')}")  # the open tab is part of the link
    expect(figure(page, "layers × heads")).to_be_visible()
    assert page.console_errors == []


def test_script_in_text_is_shown_literally_and_never_runs(page) -> None:
    choose_model(page, "toy-copy")
    set_text(page, "<img src=x onerror=alert(1)>")
    expect(page.get_by_test_id("stMain").get_by_test_id("stAlert").first).to_contain_text("does not know: '<', '='")
    page.screenshot(path=str(ARTIFACTS / "bad-input.png"))
    choose_model(page, "minilm")  # a tokenizer that accepts it: the tokens become axis labels
    set_text(page, "<img src=x onerror=alert(1)> *bold* $x$")
    expect(page.locator(".js-plotly-plot .xtick text").nth(1)).to_have_text("<")
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "script-as-tokens.png"), full_page=True)
    assert page.dialogs == []
    assert page.locator("img[src='x']").count() == 0
    assert page.console_errors == []


def test_huge_empty_and_odd_unicode_text(page) -> None:
    choose_model(page, "toy-copy")
    set_text(page, "a" * 20_000)
    expect(page.get_by_test_id("stMain").get_by_test_id("stAlert").first).to_contain_text("20,000 characters")
    set_text(page, "")
    expect(page.get_by_test_id("stMain").get_by_test_id("stAlert").first).to_contain_text("The text is empty")
    choose_model(page, "minilm")
    set_text(page, "héllo 👋 שלום مرحبا\u200bworld")
    expect(page.get_by_test_id("stAlert")).to_have_count(0)
    expect(page.locator(".js-plotly-plot .xtick text").first).to_have_text("[CLS]")
    page.screenshot(path=str(ARTIFACTS / "unicode.png"), full_page=True)
    assert page.console_errors == []


def test_a_long_run_shows_how_many_attention_layers_it_has_passed(page) -> None:
    """A run that takes over a second draws a progress bar of the attention layers it has passed, and the bar is
    gone once the page is drawn (on the CPU, where 1,600 SmolLM2 tokens take seconds even on many cores)."""
    choose_model(page, "smollm2")
    choose(page, "Device", "cpu", in_sidebar=True)  # a GPU would finish before the bar is due
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    box.fill("A slow walk along the quiet river bank at dawn. " * 145)  # about 1,600 tokens: seconds on a CPU
    box.press("Enter")
    bar = page.get_by_test_id("stProgress")
    expect(bar).to_contain_text(re.compile(r"^Attention layer ([1-9]|[12]\d|30) of 30$"),
                                timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "run-progress.png"))
    wait_idle(page)
    expect(bar).to_have_count(0)
    expect(page.locator(".js-plotly-plot .heatmaplayer").first).to_be_visible()
    assert page.console_errors == []
