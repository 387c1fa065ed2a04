"""Rerun cost of the Attention page when a person changes the layer or the head: `python -m bench.app_rerun`.

Drives the app headless with Streamlit's AppTest: MiniLM on a text of about 128 tokens, Attention page open on
its One head tab. Then RUNS reruns that each change the layer or the head (alternately), each followed by a
rerun with nothing changed; both are timed around `AppTest.run()` (script run + AppTest's own parsing of the
elements, no browser).

Output: one row per kind of rerun, with its median and p90 in ms; the target is median <= 50 ms for a change.
"ratio" is median(change) / median(plain): what changing a layer or head costs beyond the frame's rerun.
The last lines check that the model ran exactly once (calls to HFRunner.run counted) and that every rerun
saw the same Trace object (the cached one), i.e. that a layer or head change never reruns the model.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest
from transformers import AutoTokenizer

from attention_atlas.model.hf import packaged
from attention_atlas.model.hf.runner import HFRunner

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/attention.py"
MODEL = "minilm"
TOKENS = int(os.environ.get("BENCH_TOKENS", 128))  # e.g. BENCH_TOKENS=512
RUNS = 20  # timed reruns with a change (half layer, half head), and as many plain ones
WARMUP = 4
TARGET_MS = 50.0
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "


def text_of(tokenizer: Any, tokens: int) -> str:
    """The longest prefix (in words) of repeated SENTENCE that the tokenizer makes at most `tokens` tokens of."""
    words = (SENTENCE * (tokens // 4 + 1)).split()
    best = ""
    for k in range(1, len(words) + 1):
        candidate = " ".join(words[:k])
        if len(tokenizer(candidate, add_special_tokens=True)["input_ids"]) > tokens:
            break
        best = candidate
    return best


def count_runs() -> list[str]:
    """Patch HFRunner.run to record every text it is called with (the model running), for this process."""
    calls: list[str] = []
    real_run: Callable[..., Any] = HFRunner.run

    def counting_run(self: HFRunner, text: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(text)
        return real_run(self, text, *args, **kwargs)

    HFRunner.run = counting_run  # type: ignore[method-assign]
    return calls


def timed(run: Callable[[], AppTest]) -> tuple[float, AppTest]:
    start = time.perf_counter()
    at = run()
    return (time.perf_counter() - start) * 1000, at


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def first_title(at: AppTest) -> str:
    return json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["title"]["text"]


def main() -> None:
    text = text_of(AutoTokenizer.from_pretrained(str(packaged.minilm_path())), TOKENS)
    calls = count_runs()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(MODEL).run()
    at.sidebar.text_input(key="text").set_value(text).run()
    at.switch_page(PAGE).run()
    at.session_state["view"] = "One head"  # the page opens on the model view
    at.run()
    assert not at.exception, at.exception
    trace = at.session_state["trace"]
    runs_before = len(calls)
    n_layers, n_heads = trace.n_layers("encoder.attn"), trace.facts.n_heads
    print(f"{MODEL}: {len(trace.tokens)} tokens, {n_layers} layers x {n_heads} heads; "
          f"{RUNS} timed reruns with a change (layer/head alternately), each followed by a plain rerun")

    layer, head = at.selectbox(key="layer").value, at.selectbox(key="head").value  # the app opens on a chosen head
    assert layer is not None and head is not None, "the page opened with no head chosen"
    times: dict[str, list[float]] = {"layer": [], "head": [], "plain": []}
    same_trace = True
    for i in range(WARMUP + RUNS):
        if i % 2 == 0:
            layer, kind = (layer + 1) % n_layers, "layer"
            change = at.selectbox(key="layer").set_value(layer)
        else:
            head, kind = (head + 1) % n_heads, "head"
            change = at.selectbox(key="head").set_value(head)
        change_ms, at = timed(change.run)
        assert not at.exception, at.exception
        assert first_title(at).endswith(f"layer {layer} · head {head}"), first_title(at)
        plain_ms, at = timed(at.run)
        assert not at.exception, at.exception
        same_trace &= at.session_state["trace"] is trace
        if i >= WARMUP:
            times[kind].append(change_ms)
            times["plain"].append(plain_ms)

    times["layer or head"] = times["layer"] + times["head"]
    print(f"\n{'rerun':<16}{'n':>4}{'median ms':>12}{'p90 ms':>10}{'target':>10}")
    for kind in ("layer", "head", "layer or head", "plain"):
        target = f"<= {TARGET_MS:.0f}" if kind != "plain" else "-"
        print(f"{kind:<16}{len(times[kind]):>4}{statistics.median(times[kind]):>12.1f}"
              f"{p90(times[kind]):>10.1f}{target:>10}")
    median_change = statistics.median(times["layer or head"])
    ratio = median_change / statistics.median(times["plain"])
    verdict = "PASS" if median_change <= TARGET_MS else "FAIL"
    print(f"\nratio change / plain (medians): {ratio:.2f}")
    print(f"target median <= {TARGET_MS:.0f} ms for a layer or head change: {verdict} ({median_change:.1f} ms)")
    print(f"model runs: {runs_before} to open the page (the model's example text, then ours), "
          f"{len(calls) - runs_before} during the "
          f"{2 * (WARMUP + RUNS)} reruns; same Trace object throughout: {same_trace}")
    assert len(calls) == runs_before and same_trace, "a layer or head change reran the model"


if __name__ == "__main__":
    main()
