"""Eight people opening the app at once: `python -m bench.sessions`.

Starts the app's own server (app_browser.server.start_server) and Debian's Chromium (Playwright), on MiniLM (the
model the app opens on). First one session alone loads the model and runs a long text (then closes). Then, for
short sentences and for texts of about 500 tokens: one session alone, then BENCH_SESSIONS (default 8) browser
contexts opened together, each on its own text through the URL (`?model=minilm&text=…`). Each page records, in
the browser, the seconds from the start of its navigation to its first heatmap drawn (app_browser/sessions.py).

Printed per round: p50 and p95 of those seconds; the server's RSS (VmRSS of its process) before the sessions,
its peak while they ran, and 10 s after they closed; what the cache may hold beside that (the sessions' new
traces, up to the budget), so that what is left above it is memory that nothing accounts for; and the CPU
seconds the server used until every session was idle.

The budget is ATTENTION_ATLAS_CACHE_MB as for `make run` (2,560 MiB by default: every trace of this bench
fits, so `after` includes them); BENCH_CACHE_MB=48 runs the server with a budget of about one long trace.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from playwright.sync_api import sync_playwright
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from app_browser.page import CHROMIUM, CHROMIUM_ARGS
from app_browser.server import Server, start_server
from app_browser.sessions import SENTENCES, open_sessions, peak_of, percentile, wait_idle
from attention_atlas.model.hf import packaged
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE, budget_bytes

SESSIONS = int(os.environ.get("BENCH_SESSIONS", 8))
CACHE_MB = os.environ.get("BENCH_CACHE_MB")  # else the server's own budget
TRACE_MIB = 6 * 12 * 2 * 2**-20  # MiniLM's attention: 6 layers x 12 heads x float16, times tokens squared
MB = 2**20
SETTLE_S = 10


def long_text(i: int) -> str:
    """About 500 tokens, its own first and last words."""
    return f"Text number {i} of the sessions bench. " + ". ".join(SENTENCES * 7) + f". The end of text {i}."


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_of(browser, server: Server, texts: list[str]) -> tuple[list[float], int, int, int, float]:
    """Open a session per text at once; their first-figure seconds, RSS before, at the peak and after closing,
    and the server's CPU seconds until every session was idle."""
    before, cpu = server.rss(), cpu_seconds(server.pid)
    with peak_of(server.rss) as peak:
        sessions = open_sessions(browser, server.url, texts)
        seconds = sorted(session.first_figure_seconds() for session in sessions)
        for session in sessions:
            wait_idle(session)
            if session.console_errors:
                print(f"  console errors: {session.console_errors}")
    cpu = cpu_seconds(server.pid) - cpu
    for session in sessions:
        session.close()
    time.sleep(SETTLE_S)
    return seconds, before, peak[0], server.rss(), cpu


def report(label: str, texts: list[str], tokens: int, measured: tuple[list[float], int, int, int, float]) -> None:
    seconds, before, peak, after, cpu = measured
    traces = len(texts) * tokens**2 * TRACE_MIB
    print(f"{label:<34}{percentile(seconds, 50):>7.1f}{percentile(seconds, 95):>7.1f}{before / MB:>11,.0f}"
          f"{peak / MB:>9,.0f}{after / MB:>9,.0f}{(after - before) / MB:>+13,.0f}{traces:>12,.0f}{cpu:>13.1f}",
          flush=True)


def main() -> None:
    transformers_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(str(packaged.minilm_path()))
    env = {BUDGET_VARIABLE: CACHE_MB} if CACHE_MB else {}
    budget = float(CACHE_MB) * MB if CACHE_MB else budget_bytes()
    print(f"MiniLM, {SESSIONS} sessions at once, cache budget {budget / MB:,.0f} MiB; seconds from navigation to "
          f"the first heatmap; server RSS in MiB ({SETTLE_S} s after the sessions closed for 'after'); 'new traces': "
          "MiB the cache may have added for them (up to the budget)")
    print(f"{'':<34}{'p50 s':>7}{'p95 s':>7}{'RSS before':>11}{'peak':>9}{'after':>9}{'after-before':>13}"
          f"{'new traces':>12}{'server CPU s':>13}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for server in start_server(env, log_name="streamlit-bench-sessions.log"):
            round_of(browser, server, [long_text(-1)])  # loads the model
            short = [f"{SENTENCES[i % len(SENTENCES)]} {i // len(SENTENCES) or ''}".strip() for i in range(SESSIONS)]
            rounds = [("short sentences", "one person opens the app alone", short),
                      ("about 500 tokens", long_text(SESSIONS), [long_text(i) for i in range(SESSIONS)])]
            for name, alone, many in rounds:
                tokens = max(len(tokenizer(text)["input_ids"]) for text in many)
                report(f"1 session, {name}", [alone], tokens, round_of(browser, server, [alone]))
                report(f"{SESSIONS} sessions, {name}", many, tokens, round_of(browser, server, many))
            traceback = "Traceback" in server.log.read_text()
            print(f"server log: {'a traceback, see ' + str(server.log) if traceback else 'no traceback'}")
        browser.close()


if __name__ == "__main__":
    main()
