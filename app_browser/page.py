"""Driving the app in the system Chromium with Playwright: waiting for a rerun, the sidebar's pickers, pages,
plotly figures, screenshots."""

from __future__ import annotations

import itertools

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from app_browser.server import ARTIFACTS

CHROMIUM = "/usr/bin/chromium"  # Debian's package: Playwright drives it (never `playwright install`)
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LIVE = '[data-testid="stElementContainer"]:not([data-stale="true"])'  # drawn by the newest run: a rerun that
# draws an element elsewhere leaves the old one, marked stale, until it ends (or, interrupted, until the next one)
OPEN_ATTEMPTS = 3  # times `choose` opens a list whose option does not show
expect.set_options(timeout=30_000)  # reruns on a loaded 2-core CI machine take seconds


def base_path_probe(msg) -> bool:
    """Opened at a page's path (/attention), Streamlit first looks for its server under that path
    (/attention/_stcore/health: 404), then under /. Those two 404s are expected."""
    url = msg.location.get("url", "")
    return "404" in msg.text and url.endswith(("/_stcore/health", "/_stcore/host-config")) and "//" in url and \
        url.split("//", 1)[1].count("/") > 2


RERUN_START_GRACE_MS = 300  # how long an action's rerun may take to start (the wait where none starts)
SETTLED_MS = 100  # how long the app stays idle after a rerun before the wait ends (a rerun may ask for another)
# The page's own check, polled every 50 ms: Playwright's waits back off to a poll every 500 ms, which added up to half a
# second to each rerun waited for, beside a fixed 300 ms. State kept on `window` per wait (`token`).
_IDLE_AFTER_RERUN = """({token, grace, settled}) => {
  const waits = window.__atlasWaits ??= {};
  const now = performance.now();
  const wait = waits[token] ??= {start: now, sawRun: false, idleSince: null};
  const state = document.querySelector('[data-testid="stApp"]')?.getAttribute("data-test-script-state");
  if (state !== "notRunning") {
    wait.sawRun ||= state !== undefined;
    wait.idleSince = null;
    return false;
  }
  wait.idleSince ??= now;
  return wait.sawRun ? now - wait.idleSince >= settled : now - wait.start >= grace;
}"""
_waits = itertools.count()


def wait_idle(page, timeout_ms: int = 60_000) -> None:
    """Until the rerun an action started has ended and the app has stayed idle for `SETTLED_MS`; where no rerun
    starts within `RERUN_START_GRACE_MS`, until then."""
    arguments = {"token": next(_waits), "grace": RERUN_START_GRACE_MS, "settled": SETTLED_MS}
    page.wait_for_function(_IDLE_AFTER_RERUN, arg=arguments, polling=50, timeout=timeout_ms)


def set_text(page, text: str) -> None:
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    expect(box).to_have_count(1)  # after a model change the old model's box lingers until the rerun ends
    box.fill(text)
    box.press("Enter")
    wait_idle(page)


def live(scope):
    """The elements in `scope` (a page, the sidebar, the main area) that the newest run drew, not those a rerun under
    way has left stale."""
    return scope.locator(LIVE)


def choose(page, label: str, option: str, in_sidebar: bool = False) -> None:
    """Pick `option` in the selectbox labelled `label` (on the page, or in the sidebar), and wait until the box
    shows it and the rerun it starts has ended (on a loaded machine the rerun can start after wait_idle's pause:
    the box showing the option first, then idle, is what the next action may rely on)."""
    scope = page.get_by_test_id("stSidebar") if in_sidebar else page.get_by_test_id("stMain")
    box = live(scope).get_by_label(label, exact=True)
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


def model_label(model_id: str) -> str:
    """How the sidebar's model picker shows a shipped model."""
    return f"Toy (trained here) · {model_id}" if model_id.startswith("toy-") else f"Pretrained · {model_id}"


def choose_model(page, model_id: str) -> None:
    choose(page, "Model", model_label(model_id), in_sidebar=True)
    expect(page.get_by_role("heading", name=model_id)).to_be_visible()


def wait_for_model(page, model_id: str, text: str | None = None) -> None:
    """Once a page opened on a link that names a shipped model shows it in the picker, the link's text (or, where it
    names none, the model's example: any) in the text box, and its run has ended (a fresh page can look idle before
    its first run starts, and a click sends the browser's values of every widget: an empty box would be sent)."""
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_label("Model", exact=True)).to_have_value(model_label(model_id), timeout=90_000)
    box = sidebar.get_by_label("Text", exact=True)
    if text is None:
        expect(box).not_to_have_value("", timeout=90_000)
    else:
        expect(box).to_have_value(text, timeout=90_000)
    wait_idle(page)


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
