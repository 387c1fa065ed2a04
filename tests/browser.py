"""Starting the app and the system Chromium for browser tests, and the fixtures and helpers the browser
test modules share (import the fixtures by name into a test module)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect, sync_playwright

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
OPEN_ATTEMPTS = 3  # times `choose` opens a list whose option does not show
expect.set_options(timeout=30_000)  # reruns on a loaded 2-core CI machine take seconds
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]


def require_chromium() -> None:
    """Skip (loudly) without Chromium on a developer machine; fail in CI, where it must be there."""
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} not found: install Debian's chromium package to run the browser tests"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Server:
    """A running `streamlit run app.py`: its URL, its process id (for its memory) and its log file."""

    url: str
    pid: int
    log: Path

    def rss(self) -> int:
        """The server process's resident memory now, in bytes (VmRSS of /proc/PID/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {self.pid}")


def serve_app(env: dict[str, str] | None = None, log_name: str = "streamlit.log") -> Iterator[str]:
    """Start `streamlit run app.py` on a free port, wait until healthy, yield its URL, stop it."""
    for server in start_server(env, log_name):
        yield server.url


def start_server(env: dict[str, str] | None = None, log_name: str = "streamlit.log") -> Iterator[Server]:
    """As `serve_app`, yielding the Server; `env`: variables to set for it beside this process's environment."""
    port = _free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / log_name
    log = open(log_path, "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start; see {log_path}")
            time.sleep(0.3)
        yield Server(url, process.pid, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """One app server for every browser test module (each test has its own browser context, so its own session);
    starting one per module cost 6 to 10 s each."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app()


@pytest.fixture(scope="module")
def fresh_app_url() -> Iterator[str]:
    """A server of the module's own, for tests that need one no other test has used (no model loaded yet)."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app(log_name="streamlit-fresh.log")


@pytest.fixture(scope="session")
def browser():
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh tab on the app, recording console errors and any dialog (which would mean a script ran)."""
    yield from _tab(browser, app_url)


@pytest.fixture
def fresh_page(browser, fresh_app_url):
    """A fresh tab on a server of the module's own."""
    yield from _tab(browser, fresh_app_url)


def _tab(browser, url: str):
    """A tab of a new browser context (a new Streamlit session) on `url`, recording console errors and dialogs."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.console_errors = []
    page.dialogs = []
    page.on("console", lambda msg: msg.type == "error" and not _base_path_probe(msg) and page.console_errors.append(
        f"{msg.text} ({msg.location.get('url')})"))
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    wait_idle(page)
    yield page
    context.close()


def _base_path_probe(msg) -> bool:
    """Opened at a page's path (/attention), Streamlit first looks for its server under that path
    (/attention/_stcore/health: 404), then under /. Those two 404s are expected."""
    url = msg.location.get("url", "")
    return "404" in msg.text and url.endswith(("/_stcore/health", "/_stcore/host-config")) and "//" in url and \
        url.split("//", 1)[1].count("/") > 2


def wait_idle(page) -> None:
    page.wait_for_timeout(300)  # let a rerun start before waiting for it to end
    page.wait_for_selector(IDLE, timeout=60_000)


def set_text(page, text: str) -> None:
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    expect(box).to_have_count(1)  # after a model change the old model's box lingers until the rerun ends
    box.fill(text)
    box.press("Enter")
    wait_idle(page)


def choose(page, label: str, option: str, in_sidebar: bool = False) -> None:
    """Pick `option` in the selectbox labelled `label` (on the page, or in the sidebar), and wait until the box
    shows it and the rerun it starts has ended (on a loaded machine the rerun can start after wait_idle's pause:
    the box showing the option first, then idle, is what the next action may rely on)."""
    scope = page.get_by_test_id("stSidebar") if in_sidebar else page.get_by_test_id("stMain")
    box = scope.get_by_label(label, exact=True)
    expect(box).to_be_visible(timeout=90_000)  # a first run on a loaded machine may still be drawing the page
    for attempt in range(OPEN_ATTEMPTS):  # a rerun that arrives late redraws the box and closes its open list
        box.click()
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=10_000)
            break
        except PlaywrightTimeoutError:
            if attempt == OPEN_ATTEMPTS - 1:
                raise
            page.keyboard.press("Escape")
            wait_idle(page)
    expect(page.get_by_role("listbox")).to_have_count(0)  # the list closed: the choice was taken
    expect(box).to_have_value(option)
    wait_idle(page)


def choose_model(page, model_id: str) -> None:
    label = f"Toy (trained here) · {model_id}" if model_id.startswith("toy-") else f"Pretrained · {model_id}"
    choose(page, "Model", label, in_sidebar=True)
    expect(page.get_by_role("heading", name=model_id)).to_be_visible()


def open_page(page, title: str) -> None:
    page.get_by_test_id("stSidebarNavLink").filter(has_text=title).click()
    wait_idle(page)


def figure(page, title_part: str):
    """The plotly figure whose title contains `title_part`."""
    return page.locator(".js-plotly-plot").filter(has=page.locator(".gtitle", has_text=title_part))


def heatmap_values(page, title_part: str) -> list[list[float]]:
    """The z values plotly drew in that figure (its first trace), read back from the page."""
    return figure(page, title_part).first.evaluate("gd => Array.from(gd._fullData[0].z, row => Array.from(row))")


def screenshots(page, name: str) -> None:
    """The whole page at the tests' size, and the view a 1280 x 720 projector shows, as ARTIFACTS/<name>*.png."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.screenshot(path=str(ARTIFACTS / f"{name}-1280.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})
