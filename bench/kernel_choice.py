"""Which way to reduce a block of attention rows on the CPU: `python -m bench.kernel_choice`.

One block of scores as a summary reads it (128 query rows of every head, every key seen), reduced four ways to the
same numbers (each row's softmax, entropy, mean distance, shares of three keys, the thumbnail's and the rollout's
column sums), each way alternated with the others, median of ROUNDS:
- native: the C kernel the app uses (model/core/attention/native);
- torch ops: the same work as torch ops (model/core/attention/source.py and row_reduction.py);
- torch.compile: those torch ops compiled by inductor (its C++ code for the CPU);
- numba: the C kernel's loops written in Python and compiled by numba (`pip install numba` to run it; parallel
  over the rows, as the kernel is with OpenMP).
Shapes: MiniLM's layer at 512 tokens (12 heads) and SmolLM2's at 2,048 (9 heads). Also each way's first call (its
compilation, where it has one) and its largest difference from the torch ops.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.row_reduction import RowLayout, reduce_rows
from attention_atlas.model.core.attention.source import EXP_FLOOR

ROUNDS = 200
ROWS = 128
SHAPES = {"MiniLM, 512 tokens": (12, 512), "SmolLM2, 2,048 tokens": (9, 2048)}
THUMBNAIL, ROLLOUT = 64, 512
Way = Callable[[torch.Tensor], tuple[torch.Tensor, ...]]  # scores -> (p, statistics, thumbnail sums, rollout sums)


def torch_ops(layout: RowLayout, start: int) -> Way:
    """The torch ops' way: softmax in bits as exp2, sum, divide, then `reduce_rows`."""

    def way(scores: torch.Tensor):
        shifted = (scores - scores.amax(-1, keepdim=True)).clamp_(min=EXP_FLOOR)
        p = torch.exp2(shifted)
        total = p.sum(-1)
        p = p / total[..., None]
        entropy = total.log2() - (shifted * p).sum(-1)
        reduced = reduce_rows(start, p, layout, entropy, sees_ahead=True)
        assert reduced.rollout is not None  # the layout has rollout blocks (main's)
        return p, reduced.statistics, reduced.thumbnail, reduced.rollout

    return way


def native_way(layout: RowLayout, start: int) -> Way | None:
    kernel = native.attention_rows()
    if kernel is None:
        return None

    def way(scores: torch.Tensor):
        heads, rows, width = scores.shape
        p = scores.clone()
        thumb = torch.empty(heads, rows, len(layout.thumbnail_starts) - 1)
        roll = torch.empty(rows, len(layout.rollout_starts) - 1)
        stats = torch.empty(heads, rows, 5)
        native.run_kernel(kernel, p, np.ones((rows, width), dtype=bool), width, start, True, EXP_FLOOR,
                          layout.thumbnail_starts, thumb, layout.rollout_starts, roll, stats)
        return p, stats.sum(1), thumb, roll

    return way


def numba_way(layout: RowLayout, start: int) -> Way | None:
    """The kernel's loops in numba (every key seen: the mask's band is left out, as in this benchmark's blocks)."""
    if importlib.util.find_spec("numba") is None:
        return None
    import numba  # pyright: ignore[reportMissingImports] optional: installed only to measure it

    @numba.njit(parallel=True, fastmath={"reassoc", "contract", "arcp"}, cache=False)
    def rows_kernel(p, start, floor, thumb_starts, thumb, roll_starts, roll, stats):  # pragma: no cover (compiled)
        heads, rows, width = p.shape
        for r in numba.prange(rows):
            i = start + r
            for h in range(heads):
                top = -np.inf
                for k in range(width):
                    top = max(top, p[h, r, k])
                total = bits = far = 0.0
                for k in range(width):
                    x = max(p[h, r, k] - top, floor)
                    e = 2.0 ** x
                    p[h, r, k] = e
                    total += e
                    bits += e * x
                    far += e * abs(i - k)
                inv = 1.0 / total
                for k in range(width):
                    p[h, r, k] *= inv
                stats[h, r, 0] = math.log2(total) - bits * inv
                stats[h, r, 1] = far * inv
                stats[h, r, 2] = p[h, r, 0]
                stats[h, r, 3] = p[h, r, i - 1] if 1 <= i <= width else 0.0
                stats[h, r, 4] = p[h, r, i] if i < width else 0.0
                for b in range(len(thumb_starts) - 1):
                    total = 0.0
                    for k in range(thumb_starts[b], min(thumb_starts[b + 1], width)):
                        total += p[h, r, k]
                    thumb[h, r, b] = total
                for b in range(len(roll_starts) - 1):
                    total = 0.0
                    for k in range(roll_starts[b], min(roll_starts[b + 1], width)):
                        total += p[h, r, k]
                    roll[r, b] = total if h == 0 else roll[r, b] + total

    def way(scores: torch.Tensor):
        heads, rows, _ = scores.shape
        p = scores.numpy().copy()
        thumb = np.empty((heads, rows, len(layout.thumbnail_starts) - 1), np.float32)
        roll = np.empty((rows, len(layout.rollout_starts) - 1), np.float32)
        stats = np.empty((heads, rows, 5), np.float32)
        rows_kernel(p, start, np.float32(EXP_FLOOR), layout.thumbnail_starts, thumb, layout.rollout_starts, roll,
                    stats)
        return (torch.from_numpy(p), torch.from_numpy(stats).sum(1), torch.from_numpy(thumb), torch.from_numpy(roll))

    return way


def timed(way: Way, scores: torch.Tensor) -> float:
    started = time.perf_counter()
    way(scores)
    return time.perf_counter() - started


def main() -> None:
    print(f"{torch.get_num_threads()} threads; a block of {ROWS} query rows; median of {ROUNDS}, ways alternated\n")
    print(f"{'shape':24}{'way':16}{'first call s':>14}{'block ms':>10}{'/ native':>10}{'max diff':>10}")
    rng = np.random.default_rng(0)
    for label, (heads, keys) in SHAPES.items():
        start = keys // 2  # a block in the middle of the text
        layout = RowLayout(block_starts(keys, THUMBNAIL).astype(np.int32), block_starts(keys, ROLLOUT).astype(np.int32),
                           True)
        scores = torch.from_numpy((rng.normal(size=(heads, ROWS, keys)) * 4).astype(np.float32))
        reference = torch_ops(layout, start)
        ways = {"native": native_way(layout, start), "torch ops": reference,
                "torch.compile": torch.compile(reference, dynamic=False), "numba": numba_way(layout, start)}
        ways = {name: way for name, way in ways.items() if way is not None}
        first = {name: timed(way, scores) for name, way in ways.items()}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(ROUNDS):
            for name, way in ways.items():
                times[name].append(timed(way, scores))
        expected = reference(scores)
        base = statistics.median(times["native"]) if "native" in times else math.nan
        for name, way in ways.items():
            got = way(scores)
            diff = max(float((a - b).abs().max() / max(float(b.abs().max()), 1e-30)) for a, b in zip(got, expected,
                                                                                                     strict=True))
            median = statistics.median(times[name])
            print(f"{label:24}{name:16}{first[name]:>14.2f}{median * 1e3:>10.3f}{median / base:>10.2f}{diff:>10.1e}")
    if importlib.util.find_spec("numba") is None:
        print("\nnumba is not installed: `pip install numba` to measure it too")


if __name__ == "__main__":
    main()
