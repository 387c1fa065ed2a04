"""What capturing every layer's attention costs on a CUDA GPU: `python -m bench.gpu_capture`.

The GPU counterpart of bench/hf_capture.py and bench/long_capture.py. Random-weight Llama models of real shapes,
built from a LlamaConfig (no download), in bfloat16, saved to a temporary folder and loaded by the app's own loader
(model/hf/loading.py `load_hf_runner`: the "atlas" attention, the runner's taps), at 2,048 and 8,192 random tokens
with the causal mask as the app's run gives it (a 4D additive mask, `logits_to_keep=1`):
- SmolLM2-135M shape: hidden 576, 30 layers, 9 heads (3 kv), intermediate 1,536, vocab 49,152;
- Llama-1B shape: hidden 2,048, 16 layers, 32 heads (8 kv), intermediate 8,192, vocab 128,256;
- Llama-8B shape: hidden 4,096, 32 layers, 32 heads (8 kv), intermediate 14,336, vocab 128,256.
Ways, on the same weights (the model's attention implementation switched between them), every way once a round,
rounds in alternating order after one warm-up round, median of ROUNDS:
- sdpa: transformers' "sdpa" attention, nothing captured (the fast forward), the same inputs;
- capture: the app's capture of every layer's `hook_pattern` (model/core/capture/record.py): the fused forward keeping
  each pattern's source (model/core/attention/source.py), moved to the host in one batch (pinned, non-blocking);
- capture + summary: the same with `summarised=True`, as the app's run makes it: the model view's thumbnails, the
  head statistics and each layer's rollout factor reduced on the GPU before anything moves to the host
  (model/core/attention/summary.py; the rollout's product is made when its view asks);
- eager: transformers' "eager" attention with `output_attentions`, every pattern moved to the host as float16
  (what capture cost before), run only where those patterns fit in EAGER_LIMIT_GB of host memory;
- sdpa, no mask: transformers' sdpa given no mask, so it runs causal (`is_causal`: the flash kernel on a GPU), for
  reference: what the app's explicit mask costs the fast forward.
Time: from the inputs ready on the GPU to the result on the host, `torch.cuda.synchronize` before starting and before
reading the clock. Memory: the GPU's peak allocated during the work above what was allocated before it (the model
and the inputs), from `torch.cuda.reset_peak_memory_stats` and `max_memory_allocated`; the largest of the rounds.
After the warm-up round the capture's last-layer pattern (head 0, last rows) is checked against eager's, and on CUDA
the host synchronisations of one sdpa forward and of one capture + summary are counted (`torch.cuda.set_sync_debug_mode`
"warn": each a warning, counted by the line of Python that caused it): a capture + summary should add a few a run (a
mask's spans, the summary's copies to the host), none a block of rows. Also printed: the query rows a block of the
capture + summary holds at each length (model/core/attention/source.py `block_rows`, from the GPU's free memory).

Targets: capture + summary <= 1.5 x sdpa's time at 2,048 and at 8,192 tokens; its peak memory <= 1.5 x sdpa's.

Memory by design: the Llama-8B shape in bfloat16 (16 GB of weights) runs every way at 8,192 tokens on one 80 GB GPU
but eager, whose patterns (every layer's, kept on the GPU until the forward pass ends, then on the host: 137 GB at
8,192 tokens) are over EAGER_LIMIT_GB; the capture + summary's blocks take at most a quarter of the free memory (1 GiB
at most, `block_rows`). A way that runs out of memory all the same is reported so, and the others go on.

Without CUDA it says so and exits 0, unless BENCH_DEVICE=cpu and BENCH_SHAPES=tiny: then the same code runs on the
CPU in float32, one thread, with a tiny Llama shape at 64 and 128 tokens (memory: the process's peak resident set
above its level before, from /proc), to show the script runs end to end. Settings: BENCH_SHAPES (comma list of
smollm2-135m, llama-1b, llama-8b; tiny), BENCH_TOKENS (comma list), BENCH_ROUNDS (default 5 on a GPU, 3 on the CPU),
BENCH_BLOCKS (comma list of rows:MiB, e.g. 512:128,2048:512): capture + summary once more for each, its blocks of
at most that many query rows and MiB (on CUDA the block's working memory, source.py DEVICE_ROW_BLOCK and
DEVICE_BLOCK_BYTES, still at most a quarter of the free memory; on the CPU one float32 block, ROW_BLOCK and BLOCK_BYTES,
128:32), to compare block sizes in one session: each block costs its twenty-odd kernel launches, and a larger one more
memory.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.gpu_ways import (
    SHAPES,
    block_sizes,
    check,
    eager_gb,
    free,
    kernels,
    load,
    synchronisations,
    use_attention,
    ways_of,
)

GPU_SHAPES, GPU_TOKENS, GPU_ROUNDS = ("smollm2-135m", "llama-1b", "llama-8b"), (2048, 8192), 5
CPU_TOKENS, CPU_ROUNDS = (64, 128), 3
EAGER_LIMIT_GB = 20.0  # host memory eager's float16 patterns may take
TIME_TARGET = 1.5  # capture + summary / sdpa, at every length
MEMORY_TARGET = 1.5  # peak memory of capture + summary / sdpa's, at every length


def settings() -> tuple[torch.device, list[str], tuple[int, ...], int, tuple[tuple[int, int], ...]] | None:
    """(device, shapes, token counts, rounds, block sizes as (rows, MiB)) from the environment; None where this
    machine cannot run them."""
    cpu = os.environ.get("BENCH_DEVICE", "cuda").strip().lower() == "cpu"
    shapes = [s.strip() for s in os.environ.get("BENCH_SHAPES", "").split(",") if s.strip()]
    if cpu and shapes != ["tiny"]:
        sys.exit("BENCH_DEVICE=cpu runs the tiny shape only: set BENCH_SHAPES=tiny")
    if not cpu and not torch.cuda.is_available():
        return None
    for shape in shapes:
        if shape not in SHAPES:
            sys.exit(f"unknown shape {shape!r} in BENCH_SHAPES; known: {', '.join(SHAPES)}")
    tokens = os.environ.get("BENCH_TOKENS")
    lengths = tuple(int(n) for n in tokens.split(",")) if tokens else CPU_TOKENS if cpu else GPU_TOKENS
    rounds = int(os.environ.get("BENCH_ROUNDS", CPU_ROUNDS if cpu else GPU_ROUNDS))
    try:
        blocks = tuple((int(rows), int(mib)) for rows, mib in (
            size.split(":") for size in os.environ.get("BENCH_BLOCKS", "").split(",") if size.strip()))
    except ValueError:
        sys.exit("BENCH_BLOCKS is a comma list of rows:MiB, e.g. 512:128,2048:512")
    return torch.device("cpu" if cpu else "cuda"), shapes or list(GPU_SHAPES), lengths, rounds, blocks


# -- timing and memory -----------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    """A /proc/self/status memory field (VmRSS, VmHWM) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@dataclass
class Measured:
    seconds: float
    peak_bytes: float | None  # above what was allocated before; None where it cannot be read
    result: object


def measure(device: torch.device, work: Callable[[], object]) -> Measured:
    """Run `work` once: its wall time with the device synchronised at both ends, and its peak memory above before
    (CUDA: allocated on the GPU; CPU: the process's resident set)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # nothing of the previous way still running
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        result = work()
        torch.cuda.synchronize(device)  # every kernel and copy it launched is done
        seconds = time.perf_counter() - start
        return Measured(seconds, torch.cuda.max_memory_allocated(device) - before, result)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
        before: int | None = _status_kib("VmRSS")
    except OSError:  # not Linux, or not allowed
        before = None
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    peak = None if before is None else (_status_kib("VmHWM") - before) * 1024.0
    return Measured(seconds, peak, result)


def bench(runner, length: int, device: torch.device, rounds: int, blocks: tuple[tuple[int, int], ...] = ()
          ) -> dict[str, list[Measured] | str]:
    """{way: its measured rounds, or why it was not run}, in the order of `ways_of`."""
    ways = ways_of(runner, length, device, blocks)
    found: dict[str, list[Measured] | str] = {way: [] for way in ways}
    gb = eager_gb(runner.model.config, length)
    if gb > EAGER_LIMIT_GB:
        found["eager"] = f"not run: its patterns would take {gb:,.1f} GB on the host (over {EAGER_LIMIT_GB:.0f})"
    from attention_atlas.model.core.devices import is_out_of_memory
    from attention_atlas.model.hf.heads import ATTENTION

    try:
        for round_ in range(rounds + 1):  # round 0 warms up
            order = list(ways) if round_ % 2 == 0 else list(ways)[::-1]
            kept: dict[str, object] = {}
            for way in order:
                if isinstance(found[way], str):
                    continue
                implementation, work = ways[way]
                use_attention(runner.model, implementation)
                try:
                    done = measure(device, work)
                except RuntimeError as error:  # torch.OutOfMemoryError among them
                    if not is_out_of_memory(error):
                        raise
                    found[way] = f"not run: out of {device.type.upper()} memory"
                    free(device)
                    continue
                if round_:
                    found[way].append(Measured(done.seconds, done.peak_bytes, None))
                elif way in ("capture", "eager"):
                    kept[way] = done.result
                del done
            if round_ == 0 and len(kept) == 2:
                print(f"  check: capture's last-layer pattern vs eager's, head 0, last 4 rows: max |difference| "
                      f"{check(kept['capture'], kept['eager']):.2e}", flush=True)
            del kept
            if round_ == 0 and device.type == "cuda":
                counted = {way: ways[way] for way in ("sdpa", "capture + summary") if isinstance(found[way], list)}
                print(synchronisations(runner.model, counted), flush=True)
    finally:
        use_attention(runner.model, ATTENTION)  # as the app runs it
    return found


def report(found: dict[str, list[Measured] | str]) -> None:
    """Rows of one shape and length: median ms, / sdpa, peak MiB (the largest of the rounds), / sdpa, targets."""
    width = max(20, *(len(way) + 2 for way in found))
    print(f"  {'way':<{width}}{'ms':>11}{'/ sdpa':>9}{'peak MiB':>12}{'/ sdpa':>9}   targets")
    base = found["sdpa"]
    base_ms = statistics.median(m.seconds for m in base) * 1e3 if isinstance(base, list) and base else None
    base_peaks = [m.peak_bytes for m in base] if isinstance(base, list) else []
    base_mib = max(base_peaks) / 2**20 if base_peaks and None not in base_peaks else None
    for way, rounds in found.items():
        if isinstance(rounds, str):
            print(f"  {way:<{width}}{rounds}")
            continue
        ms = statistics.median(m.seconds for m in rounds) * 1e3
        peaks = [m.peak_bytes for m in rounds]
        mib = max(peaks) / 2**20 if None not in peaks else None
        time_ratio = ms / base_ms if base_ms else float("nan")
        memory_ratio = mib / base_mib if mib is not None and base_mib else float("nan")
        cells = (f"  {way:<{width}}{ms:>11,.1f}{shown(time_ratio):>9}"
                 f"{'n/a' if mib is None else f'{mib:,.1f}':>12}{shown(memory_ratio):>9}")
        summary = way.startswith("capture + summary")
        print(cells + (f"   {targets(time_ratio, memory_ratio)}" if summary else ""))


def verdict(ratio: float, limit: float) -> str:
    return "unknown" if ratio != ratio else "met" if ratio <= limit else "missed"


def shown(ratio: float) -> str:
    return "-" if ratio != ratio else f"{ratio:.2f}"  # NaN: sdpa's took nothing measurable


def targets(time_ratio: float, memory_ratio: float) -> str:
    """The targets of capture + summary, each met or missed."""
    return (f"time <= {TIME_TARGET} x sdpa: {verdict(time_ratio, TIME_TARGET)}; "
            f"memory <= {MEMORY_TARGET} x sdpa's: {verdict(memory_ratio, MEMORY_TARGET)}")


def main() -> None:
    chosen = settings()
    if chosen is None:
        print("bench.gpu_capture: no CUDA GPU here, nothing measured (BENCH_DEVICE=cpu BENCH_SHAPES=tiny runs a tiny "
              "shape on the CPU)")
        return
    device, shapes, lengths, rounds, blocks = chosen
    if device.type == "cpu":
        torch.set_num_threads(1)  # a tiny model: more threads only wait for each other (and for other work here)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    from attention_atlas.model.core.devices import PRECISIONS

    dtype = PRECISIONS["bfloat16" if device.type == "cuda" else "float32"]
    where = (f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})" if device.type == "cuda"
             else f"CPU, {torch.get_num_threads()} thread(s)")
    print(f"{where}; torch {torch.__version__}, transformers {transformers.__version__}; {str(dtype)[6:]}; "
          f"median of {rounds} rounds after a warm-up, peak memory the largest of them, above the loaded model "
          f"({'GPU allocated' if device.type == 'cuda' else 'process resident set'})", flush=True)
    for shape in shapes:
        label = SHAPES[shape][0]
        start = time.perf_counter()
        runner = load(shape, device, dtype)
        model_mib = (torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda"
                     else sum(p.nbytes for p in runner.model.parameters()) / 2**20)
        print(f"\n{label}: built and loaded in {time.perf_counter() - start:.1f} s, {model_mib:,.0f} MiB", flush=True)
        for length in lengths:
            print(f"\n{label}, {length:,} tokens", flush=True)
            if device.type == "cuda":
                print(kernels(runner.model.config, length, device, dtype), flush=True)
                print(block_sizes(runner.model.config, length, device), flush=True)
            report(bench(runner, length, device, rounds, blocks))
        del runner
        free(device)


if __name__ == "__main__":
    main()
