"""The CPU kernel of this checkout against another version of it: `python -m bench.kernel_ab [REVISION]`.

Builds attention_rows.c as it is at REVISION (a git revision; default HEAD) beside this checkout's, with the same
flags (model/core/attention/native), and reduces the same blocks of scores with both, each way alternated with the
other in one process, median of BENCH_ROUNDS (default 150). Blocks as a summary reads them (a layer's every head,
a block of query rows, the thumbnail's 64 and the rollout's 512 column blocks): MiniLM at 512 tokens (every key
seen), SmolLM2 at 2,048 and 8,192 tokens (a causal mask's block: every key before the band seen, then the band).
Prints each way's milliseconds a block, their ratio, and the largest difference between the two ways' numbers
(probabilities, statistics, thumbnail and rollout sums).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.source import EXP_FLOOR

CASES = {  # name: (heads, rows, the block's first row, keys in all (the layouts'), keys computed, causal)
    "MiniLM, 512 tokens": (12, 512, 0, 512, 512, False),  # every key seen: one block of every row
    "SmolLM2, 2,048 tokens, the last block": (9, 128, 1920, 2048, 2048, True),
    "SmolLM2, 8,192 tokens, a middle block": (9, 113, 3983, 8192, 4096, True),
    "SmolLM2, 8,192 tokens, the last block": (9, 113, 8079, 8192, 8192, True),
}
Reduce = Callable[[], tuple[float, tuple[torch.Tensor, ...]]]  # -> (seconds the kernel took, what it made)


def kernel_at(revision: str, folder: Path):
    """The kernel as attention_rows.c is at `revision`, built into `folder`."""
    path = native.SOURCE.relative_to(Path(native.__file__).resolve().parents[4])
    text = subprocess.run(["git", "show", f"{revision}:{path}"], check=True, capture_output=True, text=True).stdout
    source = folder / "attention_rows.c"
    source.write_text(text)
    library = native._built(openmp=True, source=source)
    if library is None:
        sys.exit("the kernel did not compile")
    return native.loaded(library)


def way(kernel, case: tuple[int, int, int, int, int, bool], scores: torch.Tensor) -> Reduce:
    heads, rows, start, keys, width, causal = case
    allowed = torch.ones(rows, width, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(start)
    thumb_starts, roll_starts = block_starts(keys, 64).astype(np.int32), block_starts(keys, 512).astype(np.int32)
    work = scores.clone()

    def reduce() -> tuple[float, tuple[torch.Tensor, ...]]:
        work.copy_(scores)  # the kernel writes the probabilities over the scores
        thumb = torch.empty(heads, rows, len(thumb_starts) - 1)
        roll, stats = torch.empty(rows, len(roll_starts) - 1), torch.empty(heads, rows, 5)
        started = time.perf_counter()
        native.run_kernel(kernel, work, allowed, start if causal else width, start, True, EXP_FLOOR, thumb_starts,
                          thumb, roll_starts, roll, stats)
        return time.perf_counter() - started, (work, stats, thumb, roll)

    return reduce


def main() -> None:
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    rounds = int(os.environ.get("BENCH_ROUNDS", 150))
    current = native.attention_rows()
    if current is None:
        sys.exit("no C compiler here: the kernel is not built")
    with tempfile.TemporaryDirectory() as folder:
        os.environ["ATTENTION_ATLAS_CACHE"] = folder  # the other version's build goes there, not into the cache
        other = kernel_at(revision, Path(folder))
        print(f"{torch.get_num_threads()} threads; {revision} against this checkout, median of {rounds}")
        for name, case in CASES.items():
            heads, rows, _, _, width, _ = case
            scores = torch.randn(heads, rows, width, generator=torch.Generator().manual_seed(0)) * 4
            ways = {revision: way(other, case, scores), "this checkout": way(current, case, scores)}
            made = [w()[1] for w in ways.values()]
            difference = max(float((a - b).abs().max()) for a, b in zip(*made, strict=True))
            seconds: dict[str, list[float]] = {label: [] for label in ways}
            for round_ in range(rounds):
                for label in ways if round_ % 2 else reversed(ways):
                    seconds[label].append(ways[label]()[0])
            before, after = (statistics.median(seconds[label]) * 1e3 for label in ways)
            print(f"  {name}: {revision} {before:.2f} ms, this checkout {after:.2f} ms ({after / before:.2f} x); "
                  f"largest difference {difference:.1e}")


if __name__ == "__main__":
    main()
