"""A long text on SmolLM2 (CPU) in a real browser, view by view: `python -m bench.browser_long`.

Starts the app (app_browser.server.serve_app) and Debian's Chromium (Playwright) at 1280 × 720 (a projector), chooses
SmolLM2 in the sidebar and types a text of about BENCH_TOKENS tokens (default 8,192; counted with the model's own
tokenizer), timed from filling the box to the Overview settled: the app idle, nothing stale, every plotly figure
of the main area drawn (bench.browser_attention.settle) — "run + Overview". Then, PASSES times (cold: the views'
summaries are computed then and kept with the trace; warm: both caches may hit), each view timed from the click
to its figures drawn, the figure with the view's title among them:
- Attention (sidebar link): the page opens on its "Model view" tab, the layers × heads thumbnails;
- the "One head" tab: one head through the 512 × 512 window;
- the "Rollout" tab: beyond 512 tokens, the rollout on 512 blocks;
- the "Head statistics" tab: its table and the layers × heads heatmap of entropy;
- (the "Model view" tab, not timed, so that the next pass's Attention opens on it: the page remembers its tab)
- Overview (sidebar link): its head heatmap (the last 512 × 512 cells).

Per view: seconds; the longest main-thread task of the page that started in that window (a PerformanceObserver for
'longtask' entries, installed before the page loads: nothing else runs on that thread while one lasts, so the
page cannot scroll, hover or take a click), and how many tasks over 50 ms; MB (10^6 bytes) received over the
websocket (Streamlit's ForwardMsg protobufs); the CPU seconds that the Streamlit server and the browser (Chromium
+ Playwright's driver) used meanwhile, which tells where the wait goes. A screenshot of each view (the 1280 × 720
viewport as the view opens, and scrolled to its figure) is saved under a temp folder.

Targets: every view after the run < 3 s; no main-thread task > 1 s (the run included). The run itself has no
time target here (bench/long_capture.py measures the capture).

SmolLM2 reads up to 8,192 tokens (model/hf/facts.py longest_input) and the text box holds 60,000 characters
(ui/url_state.py MAX_TEXT_CHARS). The tokens the app ran are read back from the Overview and printed beside those
typed.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from app_browser.page import CHROMIUM, CHROMIUM_ARGS, IDLE, figure
from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.ui.url_state import MAX_TEXT_CHARS
from bench.browser_attention import (
    LOGS,
    Frames,
    app_server,
    choose_model,
    cpu_split,
    nav,
    set_text,
    settle,
    text_of,
    tokenizer_folder,
)

MODEL = "smollm2"
TOKENS = int(os.environ.get("BENCH_TOKENS", 8192))
PASSES = ("cold", "warm")
TARGET_S, TARGET_TASK_MS = 3.0, 1000.0
VIEW_TIMEOUT_MS = 120_000
VIEWPORT = {"width": 1280, "height": 720}

# Every main-thread task over 50 ms, as {start, duration} in the page's performance.now() milliseconds. Streamlit
# moves between pages without loading a document, so the list lasts the whole visit.
LONGTASKS_JS = """(() => {
  window.__longtasks = [];
  try {
    const keep = (entries) => entries.forEach(
      (e) => window.__longtasks.push({start: e.startTime, duration: e.duration}));
    window.__longtaskObserver = new PerformanceObserver((list) => keep(list.getEntries()));
    window.__longtaskObserver.observe({type: 'longtask', buffered: true});
    window.__takeLongtasks = () => { keep(window.__longtaskObserver.takeRecords()); return window.__longtasks; };
  } catch (e) {
    window.__takeLongtasks = () => null;  // no 'longtask' entries in this browser
  }
})();"""
SCROLL_BACK_JS = "() => document.querySelectorAll('*').forEach((el) => { if (el.scrollTop) el.scrollTop = 0; })"


@dataclass(frozen=True)
class View:
    name: str
    open: Callable[[Page], None]  # the click
    attention: bool  # on the Attention page (it has tabs)
    title: str  # part of the title of a figure that the view draws


def tab(name: str) -> Callable[[Page], None]:
    return lambda page: page.get_by_role("tab", name=name).click()


VIEWS = (
    View("Attention · Model view", lambda page: nav(page, "Attention"), True, "layers × heads"),
    View("One head", tab("One head"), True, "· head"),
    View("Rollout", tab("Rollout"), True, "rollout ·"),
    View("Head statistics", tab("Head statistics"), True, STATISTICS[0]),
    View("Overview", lambda page: nav(page, "Overview"), False, "· head"),
)


@dataclass
class Timing:
    view: str
    passed: str  # "cold", "warm", or "" for the run
    seconds: float | None  # None: not settled within VIEW_TIMEOUT_MS
    tasks: list[float] | None  # durations (ms) of the long tasks that started in the window; None: not observed
    megabytes: float
    server_cpu: float
    browser_cpu: float
    figures: int
    errors: int  # exceptions shown in the main area
    screenshot: Path
    target_s: float | None  # None: no time target

    @property
    def longest_ms(self) -> float | None:
        return None if self.tasks is None else max(self.tasks, default=0.0)

    @property
    def failures(self) -> list[str]:
        failures = []
        if self.seconds is None:
            failures.append("timeout")
        elif self.target_s is not None and self.seconds >= self.target_s:
            failures.append("slow")
        if self.longest_ms is not None and self.longest_ms > TARGET_TASK_MS:
            failures.append("freeze")
        if self.errors:
            failures.append("error")
        return failures


def timed(page: Page, frames: Frames, shots: Path, name: str, passed: str, act: Callable[[], int], title: str,
          target_s: float | None) -> Timing:
    """Run `act` (a click and the wait for its view, returning the number of figures), measure it, and take the
    screenshots (after the measures): the viewport, and the viewport scrolled to the figure titled `title`."""
    first = len(frames.received)
    server_before, browser_before = cpu_split()
    page_start = page.evaluate("performance.now()")
    start = time.perf_counter()
    try:
        figures = act()
        seconds: float | None = time.perf_counter() - start
    except PlaywrightTimeoutError:
        figures, seconds = 0, None
    server_after, browser_after = cpu_split()
    page_end = page.evaluate("performance.now()")
    entries = page.evaluate("window.__takeLongtasks()")
    tasks = None if entries is None else [e["duration"] for e in entries if page_start <= e["start"] <= page_end]
    received = sum(len(payload) for _, payload in frames.received[first:]) / 1e6
    errors = page.get_by_test_id("stMain").get_by_test_id("stException").count()
    slug = re.sub(r"\W+", "-", f"{passed} {name}".strip().lower()).strip("-")
    screenshot = shots / f"{slug}.png"
    page.screenshot(path=str(screenshot))  # what the person sees on arrival
    drawn = figure(page, title)
    if figures and drawn.count():  # and the view's figure, scrolled into view (it may start below the fold)
        drawn.first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{slug}-figure.png"))
        page.evaluate(SCROLL_BACK_JS)
    return Timing(name, passed, seconds, tasks, received, server_after - server_before,
                  browser_after - browser_before, figures, errors, screenshot, target_s)


def typed(page: Page, text: str) -> int:
    """Fill the box, press Enter, wait for the Overview settled; the number of figures."""
    set_text(page, text)
    return settle(page, attention=False)


def app_tokens(page: Page) -> str:
    """The text's length as the Overview says it, beyond 512 tokens ("… of 2,048 × 2,048.")."""
    caption = page.get_by_test_id("stMain").get_by_text(re.compile(r"of [\d,]+ × [\d,]+\."))
    if not caption.count():
        return "? (no window caption on the Overview)"
    return re.search(r"of ([\d,]+) × ", caption.first.inner_text()).group(1)


def run(url: str, shots: Path) -> tuple[int, int, str, list[Timing], list[str]]:
    """The benchmark: the tokens typed, the characters, the tokens the app ran, the timings, console errors."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_context(viewport=VIEWPORT).new_page()
            console: list[str] = []
            page.on("console", lambda msg: msg.type == "error" and console.append(msg.text))
            frames = Frames()
            page.on("websocket", frames.attach)
            page.add_init_script(LONGTASKS_JS)
            page.goto(url)
            page.wait_for_selector(IDLE, timeout=60_000)
            choose_model(page, MODEL)  # loads the model (the first load converts its weights): not timed
            settle(page, attention=False)
            text, tokens = text_of(AutoTokenizer.from_pretrained(str(tokenizer_folder(MODEL))), TOKENS)
            timings = [timed(page, frames, shots, "run + Overview", "", lambda: typed(page, text),
                             "· head", None)]
            ran = app_tokens(page)
            for passed in PASSES:
                for view in VIEWS:
                    def act(view: View = view) -> int:
                        view.open(page)
                        return settle(page, view.attention, view.title, timeout_ms=VIEW_TIMEOUT_MS)
                    timings.append(timed(page, frames, shots, view.name, passed, act, view.title, TARGET_S))
                    if view.name == "Head statistics":  # so that the next pass's Attention opens on Model view
                        tab("Model view")(page)
                        settle(page, attention=True, title="layers × heads", timeout_ms=VIEW_TIMEOUT_MS)
            return tokens, len(text), ran, timings, console
        finally:
            chromium.close()


def main() -> None:
    transformers_logging.set_verbosity_error()  # text_of tries texts over the limit on purpose
    shots = Path(tempfile.mkdtemp(prefix="bench-browser-long-"))
    with app_server() as url:
        tokens, chars, ran, timings, console = run(url, shots)

    print(f"log of the app: {LOGS / 'streamlit.log'}")
    print(f"{MODEL}: {tokens:,} tokens typed ({chars:,} characters; the box takes {MAX_TEXT_CHARS:,}), "
          f"{ran} in the app's run; viewport {VIEWPORT['width']} × {VIEWPORT['height']}\n")
    print(f"{'view':<24}{'pass':>6}{'s':>8}{'longest task ms':>17}{'tasks':>7}{'MB':>8}{'cpu server':>11}"
          f"{'cpu browser':>12}{'figures':>9}  result")
    for t in timings:
        seconds = "timeout" if t.seconds is None else f"{t.seconds:.2f}"
        longest = "n/a" if t.longest_ms is None else f"{t.longest_ms:.0f}"
        count = "n/a" if t.tasks is None else str(len(t.tasks))
        result = "FAIL (" + ", ".join(t.failures) + ")" if t.failures else "PASS"
        print(f"{t.view:<24}{t.passed:>6}{seconds:>8}{longest:>17}{count:>7}{t.megabytes:>8.2f}{t.server_cpu:>11.2f}"
              f"{t.browser_cpu:>12.2f}{t.figures:>9}  {result}")
    print(f"\ntargets: each view after the run < {TARGET_S:g} s; no main-thread task > {TARGET_TASK_MS:,.0f} ms "
          "(tasks: how many over 50 ms started in the view's window)")
    if console:
        print(f"\n{len(console)} console error(s) in the browser, the first: {console[0][:300]}")
    print(f"\nscreenshots (1280 × 720; -figure: scrolled to the view's figure), in {shots}:")
    for t in timings:
        figure = t.screenshot.with_name(f"{t.screenshot.stem}-figure.png")
        print(f"  {t.screenshot.name:<34}{figure.name if figure.exists() else ''}")


if __name__ == "__main__":
    main()
