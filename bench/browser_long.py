"""Long texts in a real browser, view by view: `python -m bench.browser_long`.

Starts the app (app_browser.server.serve_app) and Debian's Chromium (Playwright) at 1280 × 720 (a projector). Each case
(BENCH_CASES, default "smollm2:8192,random4:32768"): SmolLM2 chosen in the sidebar, or bench/long_32k.py's random
4-layer model of SmolLM2's shape (32,768 positions) typed into the custom model's folder box, and a text of about that
many tokens (the model's own tokenizer: English for SmolLM2, numbers for the random model, a digit a token so that
32,768 tokens fit the text box's 60,000 characters), timed from filling the box to the Overview settled: the app
idle, nothing stale, every plotly figure of the main area drawn (bench.browser_attention.settle) — "run + Overview";
a screenshot of the run under way (its progress bar and Stop button) a few seconds in. Then, PASSES times (cold: the
views' reductions are computed then and kept with the trace; warm: the caches may hit), each view timed from the click
to its figures drawn, the figure with the view's title among them (bench/browser_long_views.py `views`):
- Attention (sidebar link): the Model view tab, the layers × heads thumbnails, and below them the role grid;
- a head chosen (its layer, then its number: two views): the model's strongest previous-token head (its roles on the
  text's first 1,024 tokens, computed in this process), the head whose line the zoom and the distance view should show;
- the One head tab: the whole head max-pooled (the zoom) above its 512 × 512 window;
- by distance back; sinks apart; then the head most on the first token (its layer, its number), its sink apart;
- Rollout; Head statistics; Overview.
Per view: seconds; the longest main-thread task of the page that started in that window (a PerformanceObserver for
'longtask' entries, installed before the page loads: nothing else runs on that thread while one lasts), and how many
tasks over 50 ms; MB (10^6 bytes) received over the websocket; the CPU seconds of the Streamlit server and of the
browser meanwhile. Screenshots (the viewport as the view opens, and scrolled to its figure) under SHOTS, named
long8k-<view>.png and long32k-<view>.png for the views a person must see (the role grid, the zoom, the distance view, a
sink apart, the run under way).

Targets: every view after the run < 3 s; no main-thread task > 1 s (the run included). The run itself has no time
target here (bench/long_32k.py measures it against the sdpa forward).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from transformers.utils import logging as transformers_logging

from app_browser.page import CHROMIUM, CHROMIUM_ARGS, IDLE, figure
from attention_atlas.ui.url_state import MAX_TEXT_CHARS
from bench.browser_attention import LOGS, Frames, app_server, cpu_split, settle
from bench.browser_long_views import CASES, RANDOM, case_text, heads_to_draw, open_model, reset, slug, views

PASSES = ("cold", "warm")
TARGET_S, TARGET_TASK_MS = 3.0, 1000.0
VIEW_TIMEOUT_MS = 120_000
RUN_TIMEOUT_MS = 1_800_000  # a 32,768-token run on a loaded 2-core CPU: minutes
RUN_SHOT_AFTER_MS = 15_000  # the screenshot of the run under way (its bar, drawn from the first layer's first rows)
VIEWPORT = {"width": 1280, "height": 720}
SHOTS = Path("/tmp/shots")

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


@dataclass
class Timing:
    view: str
    passed: str  # "cold", "warm", or "" for the run
    seconds: float | None  # None: not settled within its timeout
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


def timed(page: Page, frames: Frames, shot: Path, name: str, passed: str, act: Callable[[], int], title: str,
          target_s: float | None) -> Timing:
    """Run `act` (a click and the wait for its view, returning the number of figures), measure it, and take the
    screenshots (after the measures): the viewport `shot`, and the viewport scrolled to the figure titled `title`."""
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
    page.screenshot(path=str(shot))  # what the person sees on arrival
    drawn = figure(page, title)
    if figures and drawn.count():  # and the view's figure, scrolled into view (it may start below the fold)
        drawn.first.scroll_into_view_if_needed()
        page.screenshot(path=str(shot.with_name(f"{shot.stem}-figure.png")))
        page.evaluate(SCROLL_BACK_JS)
    return Timing(name, passed, seconds, tasks, received, server_after - server_before,
                  browser_after - browser_before, figures, errors, shot, target_s)


def typed(page: Page, text: str, shot: Path) -> int:
    """Fill the box, press Enter, take the screenshot of the run under way, wait for the Overview settled; the number
    of figures."""
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(RUN_SHOT_AFTER_MS)
    page.screenshot(path=str(shot))
    return settle(page, attention=False, timeout_ms=RUN_TIMEOUT_MS)


def run_case(page: Page, frames: Frames, model: str, tokens: int) -> tuple[str, int, int, list[Timing]]:
    """One case: (what it ran, tokens typed, characters, the timings)."""
    from bench.long_32k import model_folder

    folder = model_folder() if model == RANDOM else None
    prefix = f"long{tokens // 1024}k"
    open_model(page, model, folder)  # loads the model (SmolLM2's first load converts its weights): not timed
    text, count, where = case_text(model, tokens, folder)
    line, sink = heads_to_draw(where, text)
    timings = [timed(page, frames, SHOTS / f"{prefix}-run.png", "run + Overview", "",
                     lambda: typed(page, text, SHOTS / f"{prefix}-run-under-way.png"), "· head", None)]
    for passed in PASSES:
        for view in views(line, sink):
            def act(view=view) -> int:
                view.open(page)
                return settle(page, view.attention, view.title, timeout_ms=VIEW_TIMEOUT_MS)
            name = view.shot if view.shot and passed == PASSES[0] else f"{passed}-{slug(view.name)}"
            timings.append(timed(page, frames, SHOTS / f"{prefix}-{name}.png", view.name, passed, act,
                                 view.figure or view.title, TARGET_S))
        reset(page)
    label = f"{model} ({folder})" if folder else model
    return f"{label}, line head L{line[0]}H{line[1]}, sink head L{sink[0]}H{sink[1]}", count, len(text), timings


def main() -> None:
    transformers_logging.set_verbosity_error()
    SHOTS.mkdir(parents=True, exist_ok=True)
    results = []
    with app_server() as url, sync_playwright() as playwright:
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
            results = [run_case(page, frames, model, tokens) for model, tokens in CASES]
        finally:
            chromium.close()
    print(f"log of the app: {LOGS / 'streamlit.log'}; viewport {VIEWPORT['width']} × {VIEWPORT['height']}; "
          f"the text box takes {MAX_TEXT_CHARS:,} characters")
    for what, tokens, chars, timings in results:
        print(f"\n{what}: {tokens:,} tokens typed ({chars:,} characters)")
        print(f"{'view':<28}{'pass':>6}{'s':>8}{'longest task ms':>17}{'tasks':>7}{'MB':>8}{'cpu server':>11}"
              f"{'cpu browser':>12}{'figures':>9}  result")
        for t in timings:
            seconds = "timeout" if t.seconds is None else f"{t.seconds:.2f}"
            longest = "n/a" if t.longest_ms is None else f"{t.longest_ms:.0f}"
            count = "n/a" if t.tasks is None else str(len(t.tasks))
            result = "FAIL (" + ", ".join(t.failures) + ")" if t.failures else "PASS"
            print(f"{t.view:<28}{t.passed:>6}{seconds:>8}{longest:>17}{count:>7}{t.megabytes:>8.2f}"
                  f"{t.server_cpu:>11.2f}{t.browser_cpu:>12.2f}{t.figures:>9}  {result}  {t.screenshot.name}")
    print(f"\ntargets: each view after the run < {TARGET_S:g} s; no main-thread task > {TARGET_TASK_MS:,.0f} ms "
          f"(tasks: how many over 50 ms started in the view's window); screenshots in {SHOTS} (-figure: scrolled to "
          "the view's figure)")
    if console:
        print(f"\n{len(console)} console error(s) in the browser, the first: {console[0][:300]}")


if __name__ == "__main__":
    main()
