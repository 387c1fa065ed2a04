"""The README's pictures, taken from the running app: `make screenshots` (or `python scripts/screenshots.py`).

Starts the app (app_browser.server), opens each view below in Debian's Chromium at 1280 × 720 (a projector's
size) and writes what it shows to docs/images/<name>.webp. Every picture the README names must be one of these
(tests/contract/test_docs.py checks that each exists).
"""

from __future__ import annotations

import io
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, expect, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere: the repository's code

from app_browser.page import CHROMIUM, CHROMIUM_ARGS, wait_idle
from app_browser.server import ROOT, serve_app

IMAGES = ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 720}
SENTENCE = "The cat sat on the mat because it was tired."
NAMES = "When Mary and John went to the store, John gave a drink to"
TOP_OF = "element => element.scrollIntoView({block: 'start'})"


def open_tab(name: str) -> Callable[[Page], None]:
    """Click the tab `name` and scroll it to the top of the window."""
    def action(page: Page) -> None:
        tab = page.get_by_role("tab", name=name)
        tab.click()
        wait_idle(page)
        tab.evaluate(TOP_OF)
    return action


def generate(page: Page) -> None:
    """Press Run, and scroll the buttons to the top of the window: the tokens written come below them."""
    run = page.get_by_role("button", name="Run")
    run.click()
    wait_idle(page)
    run.evaluate(TOP_OF)


def train(page: Page) -> None:
    """Train the induction task at the page's defaults (1–2 minutes), then scroll the timeline to the top of the
    window: the curves, the scores and the heads at the last snapshot come below it."""
    page.get_by_role("button", name="Start training").click()
    expect(page.get_by_role("button", name="Open the trained model")).to_be_visible(timeout=600_000)
    wait_idle(page)
    page.get_by_test_id("stSlider").first.evaluate(TOP_OF)


def mary_over_john(page: Page) -> None:
    """Type the answer and the wrong answer, and scroll each head's share (the first figure) to the top of the
    window."""
    main = page.get_by_test_id("stMain")
    for label, word in (("Answer (one token)", " Mary"), ("Wrong answer (one token)", " John")):
        main.get_by_label(label, exact=True).fill(word)
        main.get_by_label(label, exact=True).press("Enter")
        wait_idle(page)
    page.get_by_test_id("stPlotlyChart").first.evaluate(TOP_OF)


@dataclass(frozen=True)
class Shot:
    """One picture: the page's path, the link's parameters, and what a person does there before looking."""

    path: str
    params: dict[str, str]
    action: Callable[[Page], None] | None = None


SHOTS = {
    "overview": Shot("", {"model": "minilm", "text": SENTENCE}),
    "tour": Shot("tour", {"model": "toy-date", "text": "march 3 2021", "step": "7", "tour_head": "1"}),
    "attention-model-view": Shot("attention", {"model": "minilm", "text": SENTENCE, "view": "Model view"}),
    "masks": Shot("masks", {"model": "toy-gpt-date", "text": "14 feb 1999", "masks_view": "Scores → probabilities",
                            "layer": "1", "head": "0"}),
    "step-through": Shot("step_through", {"model": "minilm", "text": SENTENCE, "layer": "2", "head": "5"},
                         open_tab("3 · Scores → pattern")),
    "attribution": Shot("attribution", {"model": "smollm2", "text": NAMES}, mary_over_john),
    "generate": Shot("generate", {"model": "toy-gpt-date", "text": "14 feb 1999", "max_new": "12"}, generate),
    "train": Shot("train", {"model": "toy-induction", "text": "qwertyuiop"}, train),
}
SETTLE_MS = 1_500  # plotly's transitions and the fonts, after the rerun ends


def take(page: Page, name: str, shot: Shot, base_url: str) -> Path:
    """Open one view in a fresh tab (a new session, as a shared link would) and save what the viewport shows."""
    page.goto(f"{base_url}/{shot.path}?{urllib.parse.urlencode(shot.params)}")
    wait_idle(page)
    if shot.action is not None:
        shot.action(page)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    page.mouse.move(0, 0)  # no hover toolbar over a table or figure
    page.wait_for_timeout(SETTLE_MS)
    file = IMAGES / f"{name}.webp"
    Image.open(io.BytesIO(page.screenshot())).save(file, "WEBP", quality=90, method=6)
    return file


def main() -> int:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for base_url in serve_app(log_name="streamlit-screenshots.log"):
            for name, shot in SHOTS.items():
                context = chromium.new_context(viewport=VIEWPORT)
                file = take(context.new_page(), name, shot, base_url)
                print(f"{file.relative_to(ROOT)}: {file.stat().st_size / 1024:.0f} KB")
                context.close()
        chromium.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
