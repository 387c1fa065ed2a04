"""A trace file opened in the browser: through the Overview's upload, and as the file a server is started with
(`attention-atlas --trace FILE`); the run shown is the file's, on every page. A damaged upload, or one past its share
of the server's memory budget, is refused with a sentence and the app keeps working."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app_browser.page import wait_idle
from app_browser.server import ARTIFACTS, start_server
from attention_atlas import load
from attention_atlas.ui.page import PAGES
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE
from tests.chromium import require_chromium

SHOTS = Path("/tmp/shots")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "reverse.npz"
    load("toy-reverse").run("hello trace", hooks="*").save(path)
    return path


def _walk_every_page(page) -> None:
    """Open each page of the navigation: it draws, raises nothing, and the sidebar still shows the file's run."""
    for shown in PAGES:
        page.get_by_test_id("stSidebarNavLink").filter(has_text=shown.title).first.click()
        wait_idle(page)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        if shown.shows_run:
            expect(page.get_by_test_id("stSidebar").get_by_text("A saved run of")).to_be_visible()


def test_a_trace_file_uploaded_on_the_overview_is_shown_on_every_page(page, trace_file: Path) -> None:
    page.get_by_text("Trace files: save this run, or open a saved one").click()
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(trace_file))
    wait_idle(page)
    page.get_by_role("button", name="Show reverse.npz").click()
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention Atlas · toy-reverse")).to_be_visible()
    expect(page.get_by_text("ecart olleh")).to_be_visible()  # the file's output
    expect(page.get_by_test_id("stSidebar").get_by_text("A saved run of")).to_be_visible()
    _walk_every_page(page)
    assert not page.dialogs


def test_a_server_started_with_a_trace_file_opens_every_session_on_it_and_refuses_bad_uploads(browser, trace_file: Path,
                                                                                             tmp_path) -> None:
    """The server's budget (1.2 MiB) holds its own file's trace, and lets an upload take a quarter of it: another run's
    file of the same size is past that share (the same file's bytes would be the trace already kept), and a damaged
    copy is no trace file; each gets a sentence, and the app keeps working."""
    require_chromium()
    damaged, other = tmp_path / "damaged.npz", tmp_path / "other.npz"
    damaged.write_bytes(trace_file.read_bytes()[:4000])
    load("toy-reverse").run("other trace", hooks="*").save(other)
    SHOTS.mkdir(exist_ok=True)

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "attention_atlas", "--headless", "--address", "127.0.0.1", "--port", str(port),
                "--trace", str(trace_file)]

    for server in start_server({BUDGET_VARIABLE: "1.2"}, "streamlit-trace-file.log", command=command, cwd=tmp_path):
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(server.url)
        wait_idle(page)
        expect(page.get_by_role("heading", name="Attention Atlas · toy-reverse")).to_be_visible()
        expect(page.get_by_text("ecart olleh")).to_be_visible()
        expect(page.get_by_text("opened from the trace file reverse.npz")).to_be_visible()
        expect(page.locator(".js-plotly-plot").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "trace-file-overview.png"))
        _walk_every_page(page)
        page.get_by_test_id("stSidebarNavLink").filter(has_text="Overview").first.click()
        wait_idle(page)
        page.get_by_text("Trace files: save this run, or open a saved one").click()
        upload = page.get_by_test_id("stFileUploaderDropzoneInput")
        for file, sentence, shot in [(damaged, "damaged.npz is not a trace file", "trace-upload-damaged.png"),
                                     (other, "MiB of arrays; this server opens trace files of up to 0.3 MiB.",
                                      "trace-upload-too-large.png")]:
            upload.set_input_files(str(file))
            wait_idle(page)
            alert = page.get_by_test_id("stAlert").filter(has_text=sentence)
            expect(alert).to_be_visible()
            expect(page.get_by_test_id("stException")).to_have_count(0)
            alert.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / shot))
        page.get_by_test_id("stSidebarNavLink").filter(has_text="Attention").first.click()  # the app keeps working
        wait_idle(page)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        expect(page.locator(".js-plotly-plot").first).to_be_visible()
        page.close()
