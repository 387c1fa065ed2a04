"""Opening the Attention page in a real browser on a 512-token text: `python -m bench.browser_attention`.

Starts the app (app_browser.server.serve_app) and Debian's Chromium (Playwright). For each of MiniLM and SmolLM2:
choose the model in the sidebar, type a text of about 512 tokens (counted with the model's own tokenizer),
wait on the Overview page until the app is idle, then VISITS times: click the "Attention" link in the sidebar
(it opens on its "Model view" tab) and wait until the app is idle again with every plotly figure of the main
area drawn (a `.main-svg`, and an image in each heatmap layer): the layers × heads thumbnail grid; then click
the "One head" tab, wait until its 512 × 512 heatmap is drawn, then back to "Model view" (the page remembers its
tab) and to Overview. Only the open tab of the page is computed and sent.

Per visit: seconds from the click on "Attention" to the thumbnails drawn (the target), and apart, from the
click on "One head" to that heatmap drawn; the CPU seconds that the Streamlit server
and the browser (Chromium + Playwright's driver) used meanwhile, which tells where the wait goes whatever
else the machine is doing; MB (10^6 bytes) the browser received over the websocket in that time (Streamlit's
ForwardMsg protobufs, uncompressed by default); how many messages, and how many of them were `ref_hash`
stand-ins (the browser already had that element from an earlier run, so the server sent only its hash:
Streamlit's message cache); and the figures waited for. Visit 1 of a model is the cold one (the model
view's thumbnails are computed then, kept with the trace); later visits may hit both caches. Then the median
per model against the targets (< 3 s, < 10 MB), and the largest messages of visit 1, so that a size far above target
points at the element responsible.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, WebSocket, expect, sync_playwright
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from app_browser.page import CHROMIUM, CHROMIUM_ARGS, IDLE
from app_browser.server import serve_app
from attention_atlas.model.hf import packaged

MODELS = tuple(os.environ.get("BENCH_MODELS", "minilm,smollm2").split(","))  # e.g. BENCH_MODELS=minilm
TOKENS = int(os.environ.get("BENCH_TOKENS", 512))  # e.g. BENCH_MODELS=smollm2 BENCH_TOKENS=2048
VISITS = 3
TARGET_S, TARGET_MB = 3.0, 10.0
POLL_MS = 50  # checking every animation frame would compete with the drawing it waits for
LOAD_TIMEOUT_MS = 300_000  # SmolLM2's first load converts its weights; a 512-token run generates 8 tokens on CPU
LOGS = Path(tempfile.gettempdir()) / "bench-browser"  # the app's log (the tests' artifacts folder may be in use)
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "

# True once the run is over and the wanted page is shown without stale elements, with every figure drawn.
# `tabs` tells the pages apart: only the Attention page has st.tabs; `title`, if given, must be part of a drawn
# figure's title. Returns the number of figures.
SETTLED_JS = """([tabs, title]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const main = document.querySelector('[data-testid="stMain"]');
  if (!app || !main || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (!!main.querySelector('[data-testid="stTabs"]') !== tabs) return false;
  if (main.querySelector('[data-stale="true"]')) return false;
  const plots = [...main.querySelectorAll('.js-plotly-plot')];
  const drawn = (p) => p.querySelector('.main-svg')
    && [...p.querySelectorAll('.heatmaplayer, .imagelayer')]  // every trace layer in use holds its image
      .every((layer) => !layer.children.length || layer.querySelector('image'));
  if (title && !plots.some((p) => (p.querySelector('.gtitle')?.textContent || '').includes(title))) return false;
  return plots.length > 0 && plots.every(drawn) ? plots.length : false;
}"""


@dataclass
class Frames:
    """Every websocket frame the page receives, as (seconds, payload bytes)."""

    received: list[tuple[float, bytes]] = field(default_factory=list)

    def attach(self, ws: WebSocket) -> None:
        ws.on("framereceived", lambda payload: self.received.append(
            (time.perf_counter(), payload if isinstance(payload, bytes) else payload.encode())))


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far), for every process on this (Linux) machine."""
    table, tick = {}, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (name)"
            table[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return table


def cpu_split() -> tuple[float, float]:
    """CPU seconds used so far by the Streamlit server, and by everything else started here (Playwright's
    driver and Chromium's processes). Differences over a visit tell server work from browser work, whatever
    else the machine is busy with."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    server = other = 0.0
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        with contextlib.suppress(OSError):
            if b"streamlit" in Path(f"/proc/{pid}/cmdline").read_bytes():
                server += table[pid][1]
                continue
        other += table[pid][1]
    return server, other


@dataclass
class Visit:
    seconds: float  # to the thumbnails
    one_head_seconds: float  # from the "One head" tab to its heatmap
    frames: list[tuple[float, bytes]]  # (seconds since the click, payload)
    figures: int
    server_cpu: float
    browser_cpu: float

    @property
    def messages(self) -> list[bytes]:
        return [payload for _, payload in self.frames]


    @property
    def megabytes(self) -> float:
        return sum(map(len, self.messages)) / 1e6

    @property
    def refs(self) -> int:
        return sum(describe(m).startswith("ref_hash") for m in self.messages)


def describe(payload: bytes) -> str:
    """What a ForwardMsg carries: its type, and for a new element the element's type and key."""
    msg = ForwardMsg()
    try:
        msg.ParseFromString(payload)
    except Exception:  # not a ForwardMsg
        return "?"
    kind = msg.WhichOneof("type") or "?"
    if kind != "delta":
        return kind
    delta_kind = msg.delta.WhichOneof("type") or "?"
    if delta_kind != "new_element":
        return f"delta.{delta_kind}"
    element_kind = msg.delta.new_element.WhichOneof("type") or "?"
    element_id = getattr(getattr(msg.delta.new_element, element_kind), "id", "")
    key = element_id.rsplit("-", 1)[-1] if element_id else ""
    return f"{element_kind} {key}".strip()


def text_of(tokenizer: Any, tokens: int) -> tuple[str, int]:
    """The longest prefix (in words) of repeated SENTENCE of at most `tokens` tokens, and its token count."""
    words = (SENTENCE * (tokens // 4 + 1)).split()
    best, count = "", 0
    for k in range(1, len(words) + 1):
        candidate = " ".join(words[:k])
        n = len(tokenizer(candidate, add_special_tokens=True)["input_ids"])
        if n > tokens:
            break
        best, count = candidate, n
    return best, count


def tokenizer_folder(model_id: str) -> Path:
    """The model's tokenizer files (for SmolLM2, the converted copy: ask only once the app has loaded it)."""
    return packaged.minilm_path() if model_id == "minilm" else packaged.smollm2_folder()


def settle(page: Page, attention: bool, title: str = "", timeout_ms: float = LOAD_TIMEOUT_MS) -> int:
    return page.wait_for_function(SETTLED_JS, arg=[attention, title], timeout=timeout_ms, polling=POLL_MS).json_value()


def choose_model(page: Page, model_id: str) -> None:
    page.get_by_test_id("stSidebar").get_by_label("Model", exact=True).click()
    # the option may read "minilm" or carry a group label before it ("Pretrained · minilm")
    page.get_by_role("option", name=re.compile(rf"(^|\s){re.escape(model_id)}$")).click()
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=LOAD_TIMEOUT_MS)


def set_text(page: Page, text: str) -> None:
    box = page.get_by_test_id("stSidebar").get_by_label("Text", exact=True)
    expect(box).to_have_count(1, timeout=LOAD_TIMEOUT_MS)  # the old model's box lingers until the rerun ends
    box.fill(text)
    box.press("Enter")
    page.wait_for_timeout(300)
    settle(page, attention=False)


def nav(page: Page, name: str) -> None:
    page.get_by_test_id("stSidebarNavLink").filter(has_text=name).click()


def visit_attention(page: Page, frames: Frames) -> Visit:
    """Click Attention; time until every figure is drawn; the websocket frames received meanwhile. Then time
    the "One head" tab (outside the frames and CPU counted)."""
    first = len(frames.received)
    server_before, browser_before = cpu_split()
    start = time.perf_counter()
    nav(page, "Attention")
    figures = settle(page, attention=True, title="layers × heads", timeout_ms=120_000)
    seconds = time.perf_counter() - start
    server_after, browser_after = cpu_split()
    received = [(t - start, payload) for t, payload in frames.received[first:]]
    start = time.perf_counter()
    page.get_by_role("tab", name="One head").click()
    settle(page, attention=True, title="· head", timeout_ms=120_000)
    return Visit(seconds, time.perf_counter() - start, received, figures, server_after - server_before,
                 browser_after - browser_before)


def largest(messages: list[bytes], n: int = 5) -> list[tuple[int, str]]:
    return sorted(((len(m), describe(m)) for m in messages), reverse=True)[:n]


@contextlib.contextmanager
def app_server() -> Iterator[str]:
    """app_browser.server.serve_app, logging to LOGS."""
    yield from serve_app(log_folder=LOGS)


def main() -> None:
    transformers_logging.set_verbosity_error()  # text_of tries texts over the limit on purpose
    results: dict[str, tuple[int, list[Visit]]] = {}
    with app_server() as url, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            frames = Frames()
            page.on("websocket", frames.attach)
            page.goto(url)
            page.wait_for_selector(IDLE, timeout=60_000)
            for model_id in MODELS:
                choose_model(page, model_id)
                text, tokens = text_of(AutoTokenizer.from_pretrained(str(tokenizer_folder(model_id))), TOKENS)
                set_text(page, text)
                visits = []
                for _ in range(VISITS):
                    visits.append(visit_attention(page, frames))
                    page.get_by_role("tab", name="Model view").click()
                    settle(page, attention=True, title="layers × heads")
                    nav(page, "Overview")
                    settle(page, attention=False)
                results[model_id] = (tokens, visits)
        finally:
            chromium.close()

    print(f"log of the app: {LOGS / 'streamlit.log'}\n")
    print(f"{'model':<9}{'tokens':>7}{'visit':>6}{'grid s':>8}{'one head s':>11}{'cpu server':>11}"
          f"{'cpu browser':>12}{'MB':>8}{'msgs':>6}{'refs':>6}{'figures':>9}")
    for model_id, (tokens, visits) in results.items():
        for i, v in enumerate(visits, 1):
            print(f"{model_id:<9}{tokens:>7}{i:>6}{v.seconds:>8.2f}{v.one_head_seconds:>11.2f}{v.server_cpu:>11.2f}"
                  f"{v.browser_cpu:>12.2f}{v.megabytes:>8.2f}{len(v.messages):>6}{v.refs:>6}{v.figures:>9}")
    print(f"\n{'model':<9}{'median s':>10}{'target':>8}{'median MB':>11}{'target':>8}")
    for model_id, (_, visits) in results.items():
        seconds = statistics.median(v.seconds for v in visits)
        megabytes = statistics.median(v.megabytes for v in visits)
        print(f"{model_id:<9}{seconds:>10.2f}{f'< {TARGET_S:g}':>8}{megabytes:>11.2f}{f'< {TARGET_MB:g}':>8}"
              f"  {'PASS' if seconds < TARGET_S and megabytes < TARGET_MB else 'FAIL'}")
    for model_id, (_, visits) in results.items():
        print(f"\nlargest messages, {model_id}, visit 1:")
        for size, what in largest(visits[0].messages):
            print(f"  {size / 1e6:>8.3f} MB  {what}")


if __name__ == "__main__":
    main()
