"""bench/gpu_capture.py, the tool that measures the GPU targets, runs end to end on the
CPU with its tiny shape, block sizes swept as asked, and its capture agrees with eager attention."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_benchmark_runs_on_the_cpu_with_a_block_size_sweep() -> None:
    env = {**os.environ, "BENCH_DEVICE": "cpu", "BENCH_SHAPES": "tiny", "BENCH_TOKENS": "64", "BENCH_ROUNDS": "1",
           "BENCH_BLOCKS": "16:1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bench.gpu_capture"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    difference = float(re.search(r"max \|difference\| (\S+)", done.stdout).group(1))
    assert difference < 1e-4
    for way in ("sdpa", "capture + summary", "eager", "capture + summary, blocks 16 rows / 1 MiB"):
        assert re.search(rf"^  {re.escape(way)} +\d", done.stdout, re.MULTILINE), way
