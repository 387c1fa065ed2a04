"""Step-to-step time of the Tour page at 512 tokens: `python -m bench.tour_steps`.

Drives the app headless with Streamlit's AppTest on each model of BENCH_MODELS (default smollm2, minilm, toy-date)
with a text of about 512 tokens (the toy: its own example; it reads 20 characters): opens the Tour (the frame's run
and the tour's own run, timed apart), then walks every step with Next, timing each rerun around `AppTest.run()`
(the script run and AppTest's parsing of the elements; no browser), and once more with nothing changed. Prints
each step's time, the median and the slowest, their ratio to the plain rerun, and whether every step is under the
target (1 s after the run).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from attention_atlas.model.registry import load_runner
from bench.app_rerun import text_of

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/tour.py"
TOKENS = int(os.environ.get("BENCH_TOKENS", 512))
TARGET_S = 1.0


def timed(at: AppTest) -> float:
    started = time.perf_counter()
    at.run()
    took = time.perf_counter() - started
    if at.exception:
        raise SystemExit(at.exception[0].message)
    return took


def measure(model_id: str) -> None:
    runner = load_runner(model_id)
    text = runner.examples[0] if model_id.startswith("toy-") else text_of(runner.tokenizer, TOKENS)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(model_id)
    at.sidebar.text_input(key="text").set_value(text)
    frame = timed(at)
    at.switch_page(PAGE)
    opened = timed(at)
    steps = len(at.selectbox(key="tour_step").options)
    times = []
    for _ in range(steps - 1):
        at.button(key="tour_next").click()
        times.append(timed(at))
    plain = statistics.median(timed(at) for _ in range(3))
    median, slowest = statistics.median(times), max(times)
    read = f"{len(runner.text.encode(text))} tokens" if hasattr(runner, "text") else repr(text)
    print(f"\n{model_id}, {read}, {steps} steps: the frame's run {frame:.2f} s; the Tour opened (its own run) "
          f"{opened:.2f} s")
    print("  each step: " + ", ".join(f"{t:.2f}" for t in times) + " s")
    verdict = "met" if slowest < TARGET_S else "missed"
    print(f"  step median {median:.3f} s ({median / plain:.2f}x a plain rerun of {plain:.3f} s), slowest "
          f"{slowest:.3f} s ({slowest / plain:.2f}x); target every step < {TARGET_S:g} s: {verdict}")


def main() -> None:
    for model_id in os.environ.get("BENCH_MODELS", "smollm2,minilm,toy-date").split(","):
        measure(model_id.strip())


if __name__ == "__main__":
    main()
