"""What saving and opening a trace file costs: `python -m bench.trace_file`.

SmolLM2 reads a text of BENCH_TOKENS tokens (default 2,048) once, every layer's pattern kept as its source; its
trace is then saved and opened ROUNDS times each way, side by side: `Trace.save` (queries and keys stored as they
are, the mask written once; model/core/trace/file.py) and numpy's `savez_compressed` of the same arrays (everything
deflated, as the file was written before), each opened with `Trace.load`.

Output: seconds to save and to open (medians), the file's MiB, and the ratios compressed / as saved.
"""

from __future__ import annotations

import io
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.registry import load_runner

ROUNDS = 3


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(save: Callable[[io.BytesIO], None]) -> tuple[float, float, int]:
    """Median seconds to save and to open, and the file's bytes."""
    saves, opens = [], []
    for _ in range(ROUNDS):
        written = io.BytesIO()
        saves.append(timed(lambda: save(written)))  # noqa: B023 (called at once)
        written.seek(0)
        opens.append(timed(lambda: Trace.load(written)))  # noqa: B023
    return statistics.median(saves), statistics.median(opens), written.getbuffer().nbytes


def main() -> None:
    tokens = int(os.environ.get("BENCH_TOKENS", "2048"))
    runner = load_runner("smollm2")
    tokenizer = runner.text.tokenizer
    words = tokenizer(" the quick brown fox jumps over the lazy dog" * (tokens // 9 + 2))["input_ids"]
    text = tokenizer.decode(words[: tokens - 2])  # about `tokens` with the special ones
    trace = runner.run(text, options=RunOptions(hooks=("*.hook_pattern",)))
    saved = io.BytesIO()
    trace.save(saved)
    saved.seek(0)
    arrays = dict(np.load(saved))  # what Trace.save writes, to deflate whole

    ways = {"Trace.save": trace.save,
            "savez_compressed": lambda f: np.savez_compressed(f, **arrays)}
    results = {label: measure(save) for label, save in ways.items()}
    print(f"SmolLM2, {len(trace.ids):,} tokens, every pattern as its source; median of {ROUNDS}")
    print(f"  {'way':<18}{'save s':>9}{'open s':>9}{'MiB':>9}")
    for label, (save_s, open_s, size) in results.items():
        print(f"  {label:<18}{save_s:>9.2f}{open_s:>9.2f}{size / 2**20:>9.1f}")
    (fast_save, fast_open, fast_size), (slow_save, slow_open, slow_size) = results.values()
    print(f"  savez_compressed / Trace.save: save {slow_save / fast_save:.1f}x, open {slow_open / fast_open:.1f}x, "
          f"size {slow_size / fast_size:.2f}x")


if __name__ == "__main__":
    main()
