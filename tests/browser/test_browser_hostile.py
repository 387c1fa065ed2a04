"""Hostile input and impatient people in a real browser, on one server: markup and script in every URL parameter
and in the text, a lone surrogate, unknown pages, a folder that is no model, rapid reruns and a model switch in
the middle of a run. No script runs, no traceback or server path shows, and the app keeps working."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from playwright.sync_api import expect

from app_browser.page import IDLE, choose, choose_model, model_label, wait_idle
from app_browser.server import ARTIFACTS
from attention_atlas.ui.page import PAGES
from tests.hostile import CORPUS, SERVER_DETAILS, value

MARKER = "__pwned"  # every script payload of the corpus sets window.__pwned and calls alert()
PAYLOAD = value(CORPUS["texts"]["img_onerror"])


def _server_rss_mb(app_url: str) -> float:
    """The resident memory of the streamlit server listening on app_url's port (found by its command line)."""
    port = app_url.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(argv) and port.encode() in argv:
            rss_pages = int((proc / "statm").read_text().split()[1])
            return rss_pages * 4096 / 2**20
    raise LookupError(f"no streamlit process on port {port}")


def _assert_harmless(page) -> None:
    """No script ran, no element came from the payloads, nothing of the server shows, no exception box."""
    assert page.dialogs == [], page.dialogs
    assert page.evaluate(f"() => window.{MARKER} === undefined")
    assert page.locator('img[src="x"]').count() == 0
    assert page.locator("script", has_text=MARKER).count() == 0
    expect(page.get_by_test_id("stException")).to_have_count(0)
    body = page.inner_text("body")
    assert not [detail for detail in SERVER_DETAILS if detail in body], body[:2000]


def _open(page, app_url: str, path: str, params: dict[str, str]) -> None:
    page.goto(f"{app_url}/{path}?{urllib.parse.urlencode(params)}")
    wait_idle(page)


def test_markup_in_every_url_parameter_and_the_text(page, app_url) -> None:
    rss_before = _server_rss_mb(app_url)
    script = CORPUS["url_values"][0]
    params = {name: script for name in CORPUS["url_params"] if name not in ("model", "tz", "target")}
    params |= {"model": "minilm", "text": PAYLOAD, "layer": "-1", "head": "NaN"}
    for index, entry in enumerate(PAGES):
        _open(page, app_url, "" if index == 0 else Path(entry.path).stem, params)
        expect(page.get_by_test_id("stSidebar").get_by_label("Model", exact=True)).to_have_value(model_label("minilm"))
        if entry.path.endswith("generate.py"):  # an encoder: the page says it does not generate
            expect(page.get_by_text("does not generate")).to_be_visible()
        elif entry.path.endswith("attribution.py"):  # nor predict a next token to attribute
            expect(page.get_by_text("predicts no next token")).to_be_visible()
        elif not entry.shows_run:  # Train: its own form, whatever the text
            expect(page.get_by_role("button", name="Start training")).to_be_visible()
        elif entry.path.endswith("ablation.py"):  # it draws once heads are chosen: every one of them
            page.get_by_text("Every head", exact=True).click()
            wait_idle(page)
            expect(page.locator(".js-plotly-plot").first).to_be_visible()
        else:
            expect(page.locator(".js-plotly-plot").first).to_be_visible()  # the text ran: its markup is just text
        _assert_harmless(page)
        page.screenshot(path=str(ARTIFACTS / f"hostile-{Path(entry.path).stem}.png"))
    _open(page, app_url, "", {"model": CORPUS["url_values"][1]})  # markup as a model id
    expect(page.get_by_test_id("stAlert").filter(has_text="is neither a folder here nor")).to_be_visible()
    _assert_harmless(page)
    print(f"server RSS {rss_before:.0f} MB before, {_server_rss_mb(app_url):.0f} MB after")
    assert page.console_errors == []


def test_a_lone_surrogate_an_unknown_page_and_a_folder_that_is_no_model(page, app_url) -> None:
    page.goto(f"{app_url}/?{CORPUS['lone_surrogate_query']}")  # %ED%A0%80: not UTF-8; decoded as U+FFFD
    wait_idle(page)
    expect(page.get_by_test_id("stAlert").filter(has_text="does not know")).to_be_visible()
    _assert_harmless(page)
    page.goto(f"{app_url}/{CORPUS['unknown_names']['page']}?model=toy-copy")
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention Atlas · toy-copy")).to_be_visible()  # the first page
    page.screenshot(path=str(ARTIFACTS / "hostile-unknown-page.png"))
    _assert_harmless(page)
    notice = page.get_by_role("dialog").filter(has_text="Page not found")  # Streamlit's own, over the first page
    expect(notice).to_contain_text("Running the app's main page")
    notice.get_by_role("button", name="Close").click()
    expect(notice).to_have_count(0)
    choose(page, "Model", "Custom · a Hugging Face folder or id…", in_sidebar=True)
    box = page.get_by_test_id("stSidebar").get_by_label("Folder or hub id", exact=True)
    box.fill("/proc/self")
    box.press("Enter")
    wait_idle(page)
    expect(page.get_by_test_id("stAlert").filter(has_text="/proc/self has no config.json")).to_be_visible()
    _assert_harmless(page)
    page.screenshot(path=str(ARTIFACTS / "hostile-folder.png"))
    choose_model(page, "toy-reverse")
    _assert_harmless(page)


def test_rapid_reruns_and_a_model_switch_during_a_run(page, app_url) -> None:
    choose_model(page, "minilm")
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    for text in ("the first text", "a second one", "and a third, much longer " * 20):
        box.fill(text)
        box.press("Enter")  # no waiting: each rerun interrupts the one before
    page.get_by_test_id("stSidebar").get_by_label("Model", exact=True).click()  # switch while that run goes on
    page.get_by_role("option", name=model_label("toy-reverse"), exact=True).click()
    page.wait_for_selector(IDLE, timeout=60_000)
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention Atlas · toy-reverse")).to_be_visible()
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    box.fill("abc")
    box.press("Enter")
    wait_idle(page)
    expect(page.get_by_test_id("stCode").first).to_have_text("cba")
    _assert_harmless(page)
    page.screenshot(path=str(ARTIFACTS / "hostile-after-rapid-reruns.png"))
    assert page.console_errors == []
