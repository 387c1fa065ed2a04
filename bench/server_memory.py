"""Server memory under many distinct long texts: `python -m bench.server_memory`.

Runs the app in this process with Streamlit's AppTest, Attention page open (the model view: each trace gets a
derived thumbnail image). AppTest rather than `streamlit run` over its websocket: it runs the real app.py and
pages with Streamlit's real process-wide caches, so this process's RSS is the server's, less the web server
(tens of MB), and the cache's own byte count can be read beside it; driving the websocket would mean speaking
Streamlit's protobuf protocol by hand, a browser would take the cores that the models need.

1. The floor: RSS less the cache once MiniLM and SmolLM2 are loaded and have each run one text as long as
   they take (512, 2,048 tokens): glibc keeps about 0.4 GB of a long run's scratch for the next run.
2. BENCH_TEXTS (default 30) distinct SmolLM2 texts of 2,048 tokens, one after another in one session.
3. BENCH_MINILM_TEXTS (default 100) distinct MiniLM texts of 512 tokens.
4. BENCH_CONCURRENT (default 4) sessions sending distinct 2,048-token SmolLM2 texts at the same moment, with
   the app's bound on runs at once (ui.run_scheduler.MAX_RUNS) and without it; the peak RSS of each.
   0 skips it.

Printed: after each text the seconds, the cache's entries and MiB, RSS, and RSS - floor - cache (memory
that the budget does not account for); then RSS against the target floor + budget (the budget from
ATTENTION_ATLAS_CACHE_MB, else the default), beside the models' parameters.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
from streamlit.testing.v1 import AppTest
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from app_browser.sessions import peak_of
from attention_atlas.model.core.bounded_cache import ByteCache
from attention_atlas.model.hf import packaged
from attention_atlas.ui import run_scheduler, trace_cache

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/attention.py"
SMOLLM2_TEXTS = int(os.environ.get("BENCH_TEXTS", 30))
MINILM_TEXTS = int(os.environ.get("BENCH_MINILM_TEXTS", 100))
CONCURRENT = int(os.environ.get("BENCH_CONCURRENT", 4))
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "
GB, MIB = 1e9, 2**20
TIMEOUT_S = 1200  # one 2,048-token SmolLM2 run takes about 30 s on 2 cores; four at once, four times that

_process = psutil.Process()


def rss() -> int:
    return _process.memory_info().rss


def distinct_text(tokenizer, tokens: int, i: int) -> str:
    """Text number i: its own first words, then SENTENCE repeated, cut to at most `tokens` tokens (specials
    included, as the app counts them)."""
    ids = tokenizer(f"Text {i}: " + SENTENCE * (tokens // 10), add_special_tokens=False)["input_ids"]
    text = tokenizer.decode(ids[:tokens])
    while len(tokenizer(text, add_special_tokens=True)["input_ids"]) > tokens:
        text = text[: text.rstrip().rfind(" ")]
    return text


def session(model_id: str) -> AppTest:
    """A session on the Attention page with `model_id` chosen (its example text run)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(model_id).run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def send(at: AppTest, model_id: str, text: str) -> None:
    at.sidebar.text_input(key="text").set_value(text).run()
    assert not at.exception, at.exception
    assert len(at.session_state["trace"].ids) > 1


def cache() -> ByteCache:
    return trace_cache.shared_cache(trace_cache.budget_bytes())


def row(label: str, seconds: float, floor: int) -> None:
    held = cache().nbytes
    print(f"{label:<12}{seconds:>8.1f}{len(cache()):>9}{held / MIB:>11,.0f}{rss() / GB:>9.2f}"
          f"{(rss() - floor - held) / GB:>14.2f}", flush=True)


def tokenizer_of(model_id: str):
    return AutoTokenizer.from_pretrained(str(packaged.smollm2_folder() if model_id == "smollm2"
                                             else packaged.minilm_path()))


def texts_one_after_another(at: AppTest, model_id: str, tokens: int, n: int, floor: int) -> None:
    tokenizer = tokenizer_of(model_id)
    at.sidebar.selectbox(key="model_id").set_value(model_id).run()
    print(f"\n{n} distinct {model_id} texts of {tokens:,} tokens, one session, Attention page (model view)")
    print(f"{'text':<12}{'s':>8}{'entries':>9}{'cache MiB':>11}{'RSS GB':>9}{'RSS-floor-cache':>16}")
    for i in range(n):
        start = time.perf_counter()
        send(at, model_id, distinct_text(tokenizer, tokens, i))
        row(f"{i + 1} ({len(at.session_state['trace'].ids)})", time.perf_counter() - start, floor)


def concurrent_peak(model_id: str, tokens: int, sessions: int, first: int) -> tuple[int, float]:
    """Peak RSS while `sessions` sessions send distinct texts at once, and the seconds until all are done."""
    tokenizer = tokenizer_of(model_id)
    apps = [session(model_id) for _ in range(sessions)]
    texts = [distinct_text(tokenizer, tokens, first + i) for i in range(sessions)]
    workers = [threading.Thread(target=send, args=(at, model_id, text)) for at, text in zip(apps, texts, strict=True)]
    start = time.perf_counter()
    with peak_of(rss, every_s=0.02) as peak:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    return peak[0], time.perf_counter() - start


def floor_of(at: AppTest) -> tuple[int, int, int]:
    """RSS less the cache with both models loaded and run on their short examples, then after one long text
    each (what the allocator keeps of a long run's scratch belongs to the models' working set); and the
    models' parameter bytes."""
    params = 0
    for model_id in ("minilm", "smollm2"):
        at.sidebar.selectbox(key="model_id").set_value(model_id).run()
        params += at.session_state["trace"].facts.n_params * 4  # float32
    loaded = rss() - cache().nbytes
    for model_id, tokens in (("minilm", 512), ("smollm2", 2048)):
        at.sidebar.selectbox(key="model_id").set_value(model_id).run()
        send(at, model_id, distinct_text(tokenizer_of(model_id), tokens, -1))
    return loaded, rss() - cache().nbytes, params


def main() -> None:
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    budget = trace_cache.budget_bytes()
    print(f"budget {budget / MIB:,.0f} MiB ({trace_cache.BUDGET_VARIABLE}), at most {run_scheduler.MAX_RUNS} runs "
          f"at once; RSS at start {rss() / GB:.2f} GB")
    at = session("toy-copy")
    loaded, floor, params = floor_of(at)
    print(f"RSS less the cache with MiniLM and SmolLM2 loaded: {loaded / GB:.2f} GB (their parameters: "
          f"{params / GB:.2f} GB); after one long text each (the floor): {floor / GB:.2f} GB. "
          f"Target: RSS < floor + budget = {(floor + budget) / GB:.2f} GB")
    with peak_of(rss, every_s=0.02) as peak:
        texts_one_after_another(at, "smollm2", 2048, SMOLLM2_TEXTS, floor)
        texts_one_after_another(at, "minilm", 512, MINILM_TEXTS, floor)
    verdict = "OK" if rss() < floor + budget else "MISSED"
    print(f"\nafter {SMOLLM2_TEXTS} SmolLM2 and {MINILM_TEXTS} MiniLM texts: RSS {rss() / GB:.2f} GB (peak "
          f"{peak[0] / GB:.2f} GB), cache {cache().nbytes / MIB:,.0f} MiB in {len(cache())} traces; "
          f"target < floor + budget = {(floor + budget) / GB:.2f} GB: {verdict}")
    if CONCURRENT:
        print(f"\n{CONCURRENT} sessions sending distinct 2,048-token SmolLM2 texts at once (each session keeps "
              "its trace, as a real one does):")
        for k, slots in enumerate((run_scheduler.MAX_RUNS, CONCURRENT)):
            run_scheduler.MAX_RUNS = slots
            run_scheduler.run_slots.clear()
            top, seconds = concurrent_peak("smollm2", 2048, CONCURRENT, SMOLLM2_TEXTS + k * CONCURRENT)
            print(f"  at most {slots} runs at once: peak RSS {top / GB:.2f} GB, {seconds:.0f} s for all "
                  f"(peak - floor - budget: {(top - floor - budget) / GB:.2f} GB)", flush=True)


if __name__ == "__main__":
    main()
