"""The app's run at 32,768 tokens against a bare sdpa forward, and what its trace keeps: `python -m bench.long_32k`.

The model: random weights of SmolLM2's shape (its own config: 9 heads, 3 key heads, d_head 64, d_model 576), 4
layers, max_position_embeddings 32,768, saved with SmolLM2's tokenizer in a folder the app opens as any local model
(`model_folder`; bench/browser_long.py opens it in the browser). The text: numbers, a digit a token (`number_text`),
BENCH_TOKENS tokens (default 32,768).

Measured in this one process, the ways alternated, a warm-up at 512 tokens first, BENCH_ROUNDS rounds (default 1):
- sdpa forward: the same weights loaded with transformers' "sdpa" attention, nothing captured (`logits_to_keep=1`);
- the app's run: what the frame runs when a person presses Run (`HFRunner.run` with every layer's pattern kept and
  the in-run summary: ui/runs.py `trace_for(..., summarised=True)`), tokenising and the trace included.
Each way's seconds, the CPU seconds of the process meanwhile (a shared machine's other work shows in the seconds,
not in these), and its peak resident memory above the process's before it (VmHWM reset by clear_refs). Then the
trace's bytes (`Trace.nbytes`: the kept queries and keys, the summary, the masks, the outputs) against the float32
queries and keys (every layer's (heads + kv heads) x tokens x d_head x 4 bytes), and one more app's run in parts
(bench/frame_run.py `Parts`: the summary's Q Kᵀ and P V, the row reduction, host copies, the trace's assembly, the
rest).

Targets: the app's run <= 1.5 x the sdpa forward; the trace <= 0.6 x the float32 queries and keys.
"""

from __future__ import annotations

import ctypes
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.cache_folder import cache_dir
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf import packaged

TOKENS = int(os.environ.get("BENCH_TOKENS", 32768))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 1))
LAYERS, CONTEXT = 4, 32768
FRAME = RunOptions(hooks=("*.hook_pattern",), summarised=True)  # ui/runs.py PATTERNS, summarised
TIME_TARGET, BYTES_TARGET = 1.5, 0.6


def model_folder() -> Path:
    """A random SmolLM2-shaped model of LAYERS layers reading CONTEXT tokens, with SmolLM2's tokenizer: made once in
    the user cache (model/core/cache_folder.py), seeded, so every bench reads the same weights."""
    folder = cache_dir() / f"random-smollm2-{LAYERS}-layers-{CONTEXT}"
    if (folder / "model.safetensors").exists():
        return folder
    smollm2 = packaged.smollm2_folder()
    config = transformers.AutoConfig.from_pretrained(smollm2)
    config.num_hidden_layers, config.max_position_embeddings = LAYERS, CONTEXT
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(smollm2).save_pretrained(folder)
    return folder


def number_text(tokenizer: object, tokens: int) -> str:
    """Random five-digit numbers, as many as make `tokens` tokens or a few fewer with the tokenizer's specials
    (SmolLM2's reads a digit a token: 32,768 tokens are about 39,000 characters, within the text box's 60,000)."""
    rng = random.Random(0)
    numbers = [str(rng.randrange(10_000, 100_000)) for _ in range(tokens // 6 + 1)]

    def length(count: int) -> int:
        return len(tokenizer(" ".join(numbers[:count]), add_special_tokens=True)["input_ids"])

    low, high = 0, len(numbers)  # the most numbers whose text is at most `tokens` tokens
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if length(middle) <= tokens else (low, middle - 1)
    return " ".join(numbers[:low])


def status_kib(field: str) -> int:
    """A /proc/self/status memory field (VmRSS, VmHWM) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measured(work: Callable[[], object]) -> tuple[float, float, float, object]:
    """Seconds of work(), the CPU seconds its process spent meanwhile (every thread's), its peak resident memory
    above the process's before it (MiB), and its result."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    before = status_kib("VmRSS")
    start, cpu = time.perf_counter(), time.process_time()
    result = work()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, (status_kib("VmHWM") - before) / 1024, result


def float32_queries_and_keys(trace: Trace) -> int:
    """Bytes of every layer's queries and keys in float32, as a full-precision capture keeps them."""
    return sum(4 * (s.query.shape[0] * s.query.shape[1] + s.key.shape[0] * s.key.shape[1]) * s.query.shape[2]
               for s in trace.pattern_sources.values())


def main() -> None:
    from attention_atlas.model.hf.loading import load_hf_runner
    from bench.frame_run import Parts, held

    folder = model_folder()
    runner = load_hf_runner(str(folder))
    sdpa = transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    text = number_text(runner.tokenizer, TOKENS)
    ids = runner.text.encode(text)
    print(f"{torch.get_num_threads()} threads, native kernel {'built' if native.attention_rows() else 'not built'}; "
          f"random SmolLM2 shape, {LAYERS} layers, {len(ids):,} tokens ({len(text):,} characters), {ROUNDS} round(s)")

    def bare(ids: list[int]) -> Callable[[], object]:
        def forward() -> object:
            with torch.inference_mode():
                return sdpa(input_ids=torch.tensor([ids]), logits_to_keep=1)
        return forward

    warm = number_text(runner.tokenizer, 512)
    bare(runner.text.encode(warm))()
    runner.run(warm, None, FRAME)
    ways = {"sdpa forward": bare(ids), "the app's run": lambda: runner.run(text, None, FRAME)}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    cpus: dict[str, list[float]] = {way: [] for way in ways}
    peaks: dict[str, list[float]] = {way: [] for way in ways}
    trace = None
    for round_ in range(ROUNDS):
        for way in ways if round_ % 2 == 0 else list(ways)[::-1]:
            took, cpu, peak, result = measured(ways[way])
            seconds[way].append(took)
            cpus[way].append(cpu)
            peaks[way].append(peak)
            trace = result if isinstance(result, Trace) else trace
            result = None
            print(f"  round {round_ + 1}: {way} {took:.1f} s ({cpu:.1f} CPU s), peak {peak:,.0f} MiB above",
                  flush=True)
    base, run = (statistics.median(values) for values in seconds.values())
    base_cpu, run_cpu = (statistics.median(values) for values in cpus.values())
    print(f"\nsdpa forward {base:.1f} s; the app's run {run:.1f} s: {run / base:.2f} x sdpa "
          f"(target <= {TIME_TARGET}: {'met' if run / base <= TIME_TARGET else 'missed'}); in CPU seconds "
          f"{base_cpu:.1f} and {run_cpu:.1f}: {run_cpu / base_cpu:.2f} x; load average {os.getloadavg()[0]:.1f}")
    sdpa_peak, run_peak = (statistics.median(values) for values in peaks.values())
    print(f"peak memory above the loaded models: sdpa {sdpa_peak:,.0f} MiB, the app's run {run_peak:,.0f} MiB")
    full = float32_queries_and_keys(trace)
    ratio = trace.nbytes / full
    print(f"the trace holds {trace.nbytes / 2**20:,.1f} MiB; the float32 queries and keys {full / 2**20:,.1f} MiB: "
          f"{ratio:.3f} x (target <= {BYTES_TARGET}: {'met' if ratio <= BYTES_TARGET else 'missed'})")
    print("  " + ", ".join(f"{part} {mib:,.1f} MiB" for part, mib in held(trace).items()))
    del trace
    parts = Parts()
    with parts.watching():
        start = time.perf_counter()
        runner.run(text, None, FRAME)
        total = time.perf_counter() - start
    rest = total - sum(parts.seconds.values())
    shown = ", ".join(f"{part} {value:.1f} s" for part, value in sorted(parts.seconds.items(), key=lambda i: -i[1]))
    print(f"the app's run in parts ({total:.1f} s, instrumented): {shown}, the rest (linear layers, norms, rotary, "
          f"MLPs, tokenising, the next-token choice) {rest:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "folder":
        print(model_folder())
    else:
        main()
