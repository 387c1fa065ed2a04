"""bench/gpu_capture.py, the tool that measures the GPU targets, runs end to end on the
CPU with its tiny shape, block sizes swept as asked, and its capture agrees with eager attention."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from attention_atlas.model.core.attention import source
from bench import gpu_ways
from bench.gpu_ways import count_synchronisations, with_blocks

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_benchmark_runs_on_the_cpu_with_a_block_size_sweep() -> None:
    env = {**os.environ, "BENCH_DEVICE": "cpu", "BENCH_SHAPES": "tiny", "BENCH_TOKENS": "64", "BENCH_ROUNDS": "1",
           "BENCH_BLOCKS": "16:1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bench.gpu_capture"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    difference = float(re.search(r"max \|difference\| (\S+)", done.stdout).group(1))
    assert difference < 1e-4
    for way in ("sdpa", "capture + summary", "eager", "capture + summary, blocks 16 rows / 1 MiB"):
        assert re.search(rf"^  {re.escape(way)} +\d", done.stdout, re.MULTILINE), way
    assert re.search(r"^  capture \+ summary +.*time <= 1\.5 x sdpa: \w+; memory <= 1\.5 x sdpa's", done.stdout,
                     re.MULTILINE)


def test_a_block_size_asked_for_sets_the_cpus_and_the_gpus_limits_while_it_runs() -> None:
    seen = with_blocks(512, 64, lambda: (source.ROW_BLOCK, source.BLOCK_BYTES, source.DEVICE_ROW_BLOCK,
                                         source.DEVICE_BLOCK_BYTES))()
    assert seen == (512, 64 << 20, 512, 64 << 20)
    assert (source.ROW_BLOCK, source.DEVICE_BLOCK_BYTES) == (128, 1 << 30)  # restored


def test_synchronisations_are_counted_by_the_line_that_caused_them(monkeypatch) -> None:
    """torch's sync debug mode warns once a synchronisation (here the warnings are made, with no GPU). The first count
    in a process runs the work once more before, uncounted."""
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(gpu_ways, "_debug_mode_used", False)

    def work() -> None:
        for _ in range(3):
            warnings.warn("called a synchronizing CUDA operation", stacklevel=1)
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)
        warnings.warn("something else", stacklevel=1)

    for runs in (2, 1):  # the first count runs the work twice, the next once
        modes.clear()
        found = count_synchronisations(work)
        assert sorted(found.values()) == [1, 3] and all(line.startswith("test_bench_gpu_capture.py:") for line in found)
        assert modes == ["warn", "default"] * runs
