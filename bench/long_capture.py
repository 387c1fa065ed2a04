"""Capture at long texts, time and peak memory, each way in a fresh process: `python -m bench.long_capture`.

SmolLM2 (CPU) at 2,048 and 8,192 tokens (BENCH_TOKENS=2048,8192), every way once per round, ROUNDS rounds in
alternating order (this machine is noisy: compare within a round):
- sdpa: transformers' sdpa attention, nothing captured (the fast forward);
- capture: the app's capture of every layer's `hook_pattern`, kept as its source (model/core/attention/source.py);
- capture + summary: as the app's run makes it (RunOptions.summarised): each layer's attention computed in blocks
  of query rows whose probabilities make both the layer's output and the reduction every whole-text view reads
  (model/core/attention/summary.py: the model view's thumbnails, the head statistics and the opening head, each
  layer's rollout factor);
- eager: transformers' eager attention with `output_attentions`, every pattern moved to the host as float16
  (what capture cost before), run only where those patterns fit in EAGER_LIMIT_GB.
Time: seconds from the inputs ready to the result on the host. Memory: the process's peak resident set during
that work above its resident set when it began (the model loaded, and what loading freed given back to the system
by malloc_trim), from /proc (VmHWM reset by clear_refs), and in brackets the process's whole peak (the model,
Python and torch included).

Targets: capture <= 1.2 x sdpa at 2,048 tokens and 1.5 x at 8,192, thumbnails and statistics counted;
peak memory at 8,192 <= 1.5 x sdpa's.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LENGTHS = tuple(int(n) for n in os.environ.get("BENCH_TOKENS", "2048,8192").split(","))
WAYS = ("sdpa", "capture", "capture + summary", "eager")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 1))
EAGER_LIMIT_GB = 8.0


def status_kib(field: str) -> int:
    """A /proc/self/status memory field (VmRSS, VmHWM) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure_one(way: str, length: int) -> dict[str, float]:
    """In this process: load, then time `way` once and measure its peak memory above the loaded model's."""
    import torch

    from attention_atlas.model.core.capture.record import capture
    from attention_atlas.model.registry import load_runner
    from bench.hf_capture import folder, inputs

    runner = load_runner("smollm2")
    batch = inputs(runner, length) | {"logits_to_keep": 1}
    model = runner.model
    if way in ("sdpa", "eager"):
        model = type(runner.model).from_pretrained(folder("smollm2"), attn_implementation=way).eval()

    def work() -> object:
        if way == "sdpa":
            with torch.inference_mode():
                return model(**batch)
        if way == "eager":
            with torch.inference_mode():
                out = model(**batch, output_attentions=True)
            return [a[0].to(torch.float16).numpy() for a in out.attentions]
        summarised = way == "capture + summary"
        return capture(model, runner.taps, ("*.hook_pattern",), lambda: model(**batch), summarised)[1]

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # memory freed while loading goes back to the system first: else a way
    # reuses it without its resident set growing, by luck of what loading left (sdpa's peak moved 990-1,549 MiB)
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    before = status_kib("VmRSS")
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    peak = status_kib("VmHWM")
    return {"seconds": seconds, "peak_mib": (peak - before) / 1024, "process_mib": peak / 1024}


def run_one(way: str, length: int) -> dict[str, float] | None:
    """`measure_one` in a fresh process (None where eager's patterns would not fit)."""
    if way == "eager" and 30 * 9 * length**2 * 2 / 1e9 > EAGER_LIMIT_GB:  # SmolLM2: 30 layers x 9 heads, float16
        return None
    done = subprocess.run([sys.executable, "-m", "bench.long_capture", way, str(length)], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print(f"SmolLM2 on the CPU, {os.cpu_count()} cores; seconds, ratio to sdpa · peak MiB above the loaded model, "
          "ratio to sdpa [the process's whole peak MiB]")
    print(f"{'tokens':>7}" + "".join(f"{way:>42}" for way in WAYS))
    for length in LENGTHS:
        for round_ in range(ROUNDS):
            ways = WAYS if round_ % 2 == 0 else WAYS[::-1]
            found = {way: run_one(way, length) for way in ways}
            bare = found["sdpa"]
            cells = []
            for way in WAYS:
                r = found[way]
                cells.append("not run (too large)" if r is None else
                             f"{r['seconds']:.1f} s {r['seconds'] / bare['seconds']:.2f}x · {r['peak_mib']:,.0f} MiB "
                             f"{r['peak_mib'] / bare['peak_mib']:.2f}x [{r['process_mib']:,.0f}]")
            print(f"{length:>7}" + "".join(f"{cell:>42}" for cell in cells), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(measure_one(sys.argv[1], int(sys.argv[2]))))
    else:
        main()
