"""Many browser sessions on one app server at once, for the load test (tests/load/test_load.py) and the sessions
bench (bench/sessions.py): open them together, time each one's first figure, and watch the server's memory."""

from __future__ import annotations

import statistics
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from playwright.sync_api import Browser, BrowserContext, Page

from app_browser.page import base_path_probe
from app_browser.page import wait_idle as wait_page_idle

FIRST_FIGURE = ".js-plotly-plot .heatmaplayer"
# Records, in the page itself, the milliseconds from the start of its navigation to the first heatmap drawn:
# the sessions are driven one after another from Python, but each page's clock starts with its own load.
FIRST_FIGURE_JS = """(() => {
  new MutationObserver((_, observer) => {
    if (window.__firstFigureMs !== undefined || !document.querySelector(SELECTOR)) return;
    window.__firstFigureMs = performance.now();
    observer.disconnect();
  }).observe(document, {childList: true, subtree: true});
})();""".replace("SELECTOR", repr(FIRST_FIGURE))
# Eight sentences with words of their own, so that a session showing another one's run would show other tokens.
SENTENCES = (
    "the red fox jumps over a sleeping dog",
    "my grandmother bakes bread every sunday morning",
    "seven violins played softly in the empty hall",
    "a comet crossed the winter sky above paris",
    "engineers repaired the bridge after heavy rain",
    "children build castles of sand near the ocean",
    "the library closes early on public holidays",
    "quantum computers factor numbers with strange bits",
)


@dataclass
class Session:
    """One browser context on the app with its own text, and what went wrong in it."""

    context: BrowserContext
    page: Page
    text: str
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def first_figure_seconds(self) -> float:
        """Seconds from the start of this page's navigation to its first heatmap drawn (waits for it)."""
        self.page.wait_for_selector(FIRST_FIGURE, timeout=120_000)
        self.page.wait_for_function("window.__firstFigureMs !== undefined", timeout=10_000)
        return self.page.evaluate("window.__firstFigureMs") / 1000

    def close(self) -> None:
        self.context.close()


def open_sessions(browser: Browser, url: str, texts: list[str], model_id: str = "minilm") -> list[Session]:
    """A context per text, all navigating at once to `url?model=…&text=…` (the calls return once each
    navigation has started; the app then runs every session's text concurrently)."""
    sessions = []
    for text in texts:
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = context.new_page()
        session = Session(context, page, text)
        page.on("console", lambda msg, s=session: msg.type == "error" and not base_path_probe(msg) and
                s.console_errors.append(f"{msg.text} ({msg.location.get('url')})"))
        page.on("dialog", lambda dialog, s=session: (s.dialogs.append(dialog.message), dialog.dismiss()))
        page.add_init_script(FIRST_FIGURE_JS)
        sessions.append(session)
    for session in sessions:
        query = urllib.parse.urlencode({"model": model_id, "text": session.text})
        session.page.goto(f"{url}/?{query}", wait_until="commit")
    return sessions


def wait_idle(session: Session) -> None:
    """`app_browser.page.wait_idle` on the session's page, with a longer limit (many sessions share the server)."""
    wait_page_idle(session.page, timeout_ms=120_000)


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0-100), interpolated between the closest ranks."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(p) - 1]


@contextmanager
def peak_of(measure: Callable[[], int], every_s: float = 0.05) -> Iterator[list[int]]:
    """Samples `measure()` every `every_s` seconds while the block runs; the list holds the peak seen."""
    peak, done = [measure()], threading.Event()

    def sample() -> None:
        while not done.wait(every_s):
            peak[0] = max(peak[0], measure())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
        peak[0] = max(peak[0], measure())
