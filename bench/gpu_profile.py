"""Where a capture + summary's time goes on a CUDA GPU: `python -m bench.gpu_profile`.

bench/gpu_capture.py times the ways; this one looks inside two of them, on the same random-weight model and inputs
(bench/gpu_ways.py): "sdpa" (the fast forward) and "capture + summary" (the app's run), one run each after a warm-up,
under torch's profiler. For each it prints the wall time, the GPU's busy time (the sum of its kernels' times), the
number of kernels launched, and the kernels that took the most GPU time. A run whose GPU is busy for much less than
its wall time waits on the host (launches, Python); one whose GPU is busy all along is bound by those kernels.
Settings: BENCH_SHAPES (one of bench/gpu_ways.py's SHAPES; default smollm2-135m), BENCH_TOKENS (default 8192),
BENCH_TOP (kernels listed, default 15). Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import os
import time

import torch

from bench.gpu_ways import SHAPES, free, load, use_attention, ways_of

PROFILED = ("sdpa", "capture + summary")


def profiled(work, device: torch.device) -> tuple[float, torch.profiler.profile]:
    """(wall seconds, the profile) of one run of `work`, after one warm-up run."""
    work()
    torch.cuda.synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        start = time.perf_counter()
        work()
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    return wall, profile


def kernel_table(profile: torch.profiler.profile, top: int) -> str:
    """The GPU's busy time, its kernel count and its `top` kernels by GPU time, as lines."""
    events = profile.events()
    assert events is not None  # None only before the profile has finished
    kernels = [event for event in events if event.device_type == torch.profiler.DeviceType.CUDA]
    busy_us = sum(event.time_range.elapsed_us() for event in kernels)
    by_name: dict[str, list[float]] = {}
    for event in kernels:
        by_name.setdefault(event.name, []).append(event.time_range.elapsed_us())
    lines = [f"  GPU busy {busy_us / 1e3:,.1f} ms in {len(kernels):,} kernels"]
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:top]
    lines += [f"  {sum(times) / 1e3:9,.2f} ms {len(times):7,} x  {name[:100]}" for name, times in ranked]
    return "\n".join(lines)


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA GPU here: bench.gpu_profile profiles a capture on one (nothing was measured)")
        return
    shape = os.environ.get("BENCH_SHAPES", "smollm2-135m")
    length = int(os.environ.get("BENCH_TOKENS", "8192"))
    top = int(os.environ.get("BENCH_TOP", "15"))
    device = torch.device("cuda")
    runner = load(shape, device, torch.bfloat16)
    print(f"{torch.cuda.get_device_name(device)}; torch {torch.__version__}; {SHAPES[shape][0]}, {length:,} tokens, "
          "bfloat16; one run after a warm-up, under torch's profiler")
    ways = ways_of(runner, length, device)
    for way in PROFILED:
        implementation, work = ways[way]
        use_attention(runner.model, implementation)
        wall, profile = profiled(work, device)
        print(f"\n{way}: {wall * 1e3:,.1f} ms wall (profiled)")
        print(kernel_table(profile, top))
        del profile
        free(device)


if __name__ == "__main__":
    main()
