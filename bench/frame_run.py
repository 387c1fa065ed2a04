"""What the app's own run costs against the fast forward: `python -m bench.frame_run`.

bench/hf_capture.py times the capture alone; this times what the app makes when a person presses Run: the frame's
run (ui/runs.py `trace_for` with `summarised=True`: `HFRunner.run` end to end with
`RunOptions(hooks=("*.hook_pattern",), summarised=True)`: tokenising, the masks, the captured forward pass with every
layer's summary, the output (the next-token choice, or an encoder's), the trace), against a bare forward of the same
ids by the same weights loaded with transformers' "sdpa" attention, nothing captured (`logits_to_keep=1` for a
decoder). Also the same run without the summary. Ways alternated in one process, a warm-up round first, median of
BENCH_ROUNDS (default 3; 1 at 8,192 tokens).

Where the frame's run spends its time (one more run, instrumented): the summary's Q K^T and P V (the matrix
products of model/core/attention/source.py), the row reduction (the native kernel's calls, its Q K^T and P V included
where it makes them itself, or the torch ops' `reduce_rows`), the copies to the host, the trace's assembly
(`trace_of_run`), a causal LM's greedy continuation (`HFRunner._continuation`: prompts of 512 tokens at most), and
the rest (the linear layers, norms, rotary, the MLPs, tokenising, the next-token choice), which is the time left.

And what a kept trace holds (step 4 of the frame's memory): the queries and keys kept (float32), the summary
(thumbnails, statistics, the rollout's factors), and everything else.

Cases: MiniLM at 512 tokens, SmolLM2 at 512, 2,048 and 8,192 (BENCH_CASES, e.g. "smollm2:2048,minilm:512").
Targets: the frame's run <= 1.25 x sdpa for SmolLM2 at 2,048 and 8,192 tokens, <= 1.4 x for MiniLM at 512.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from attention_atlas.model.core import runner as core_runner
from attention_atlas.model.core.attention import native, row_reduction, source
from attention_atlas.model.core.capture import host_copies
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import distinct_nbytes
from attention_atlas.model.hf import packaged
from attention_atlas.model.hf import runner as hf_runner
from attention_atlas.model.registry import load_runner

SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "
CASES = (("minilm", 512), ("smollm2", 512), ("smollm2", 2048), ("smollm2", 8192))
TARGETS = {"minilm": 1.4, "smollm2": 1.25}
FRAME = RunOptions(hooks=("*.hook_pattern",), summarised=True)  # ui/runs.py PATTERNS, summarised
SOURCE_FILE = Path(source.__file__).name


def cases() -> list[tuple[str, int]]:
    chosen = os.environ.get("BENCH_CASES")
    if not chosen:
        return list(CASES)
    try:
        return [(name.strip(), int(length)) for name, length in (case.split(":") for case in chosen.split(","))]
    except ValueError:
        sys.exit('BENCH_CASES is a comma list of model:tokens, e.g. "smollm2:2048,minilm:512"')


def text_of(runner: hf_runner.HFRunner, length: int) -> tuple[str, list[int]]:
    """A text the runner reads as `length` tokens or a few fewer (its specials added), and the ids it reads."""
    ids = runner.tokenizer(SENTENCE * (length // 8 + 1), add_special_tokens=False)["input_ids"]
    text = runner.tokenizer.decode(ids[: length - 2])
    return text, runner.text.encode(text)


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


class Parts:
    """Seconds spent in the parts of one run, each wrapped for the run's length (`watching`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def timer(self, part: str, function: Callable) -> Callable:
        def timed_call(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
        return timed_call

    def matmul(self, function: Callable) -> Callable:
        """torch.matmul, counted as the summary's Q K^T (source.py, into its scratch: `out=`) or P V (source.py,
        without), else left to the rest."""
        def counted(*args: object, **kwargs: object) -> object:
            caller = Path(sys._getframe(1).f_code.co_filename).name
            if caller != SOURCE_FILE:
                return function(*args, **kwargs)
            return self.timer("Q Kᵀ" if "out" in kwargs else "P V", function)(*args, **kwargs)
        return counted

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        patches = [(source.torch, "matmul", self.matmul(torch.matmul)),
                   (native, "run_kernel", self.timer("row reduction", native.run_kernel)),
                   (source, "reduce_rows", self.timer("row reduction", source.reduce_rows)),
                   (row_reduction, "reduce_rows", self.timer("row reduction", row_reduction.reduce_rows)),
                   (host_copies.HostCopies, "source", self.timer("host copies", host_copies.HostCopies.source)),
                   (host_copies.HostCopies, "wait", self.timer("host copies", host_copies.HostCopies.wait)),
                   (hf_runner, "trace_of_run", self.timer("trace assembly", core_runner.trace_of_run)),
                   (hf_runner.HFRunner, "_continuation", self.timer("the continuation",
                                                                     hf_runner.HFRunner._continuation))]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, patched in patches:
            setattr(owner, name, patched)
        try:
            yield
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)


def held(trace: object) -> dict[str, float]:
    """MiB a trace holds (`Trace.nbytes`, shared arrays once): its patterns' kept queries and keys, its summaries,
    the rest (the masks every layer shares, outputs, tokens)."""
    sources = distinct_nbytes([a for s in trace.pattern_sources.values() for a in (s.query, s.key)])
    summaries = sum(summary.nbytes for summary in trace.summaries.values())
    return {"queries and keys": sources / 2**20, "summary": summaries / 2**20,
            "other": (trace.nbytes - sources - summaries) / 2**20}


def measure(model_id: str, length: int, rounds: int) -> None:
    runner = load_runner(model_id)
    folder = packaged.minilm_path() if model_id == "minilm" else packaged.smollm2_folder()
    sdpa = type(runner.model).from_pretrained(folder, attn_implementation="sdpa").eval()
    text, ids = text_of(runner, length)
    decoder = runner.family.kind == "decoder"
    batch = {"input_ids": torch.tensor([ids])} | ({"logits_to_keep": 1} if decoder else {})

    def bare() -> None:
        with torch.inference_mode():
            sdpa(**batch)

    ways = {"sdpa forward": bare,
            "frame's run": lambda: runner.run(text, None, FRAME),
            "run, no summary": lambda: runner.run(text, None, RunOptions(hooks=FRAME.hooks))}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    for round_ in range(rounds + 1):  # round 0 warms up
        order = list(ways) if round_ % 2 == 0 else list(ways)[::-1]
        for way in order:
            took = timed(ways[way])
            if round_:
                seconds[way].append(took)
    median = {way: statistics.median(values) for way, values in seconds.items()}
    base = median["sdpa forward"]
    print(f"\n{model_id}, {len(ids):,} tokens ({rounds} rounds)", flush=True)
    for way, value in median.items():
        target = f"   target <= {TARGETS[model_id]} x: {'met' if value / base <= TARGETS[model_id] else 'missed'}" \
            if way == "frame's run" else ""
        print(f"  {way:<18}{value:>9.2f} s{value / base:>8.2f} x sdpa{target}")
    parts = Parts()
    with parts.watching():
        start = time.perf_counter()
        trace = runner.run(text, None, FRAME)
        total = time.perf_counter() - start
    rest = total - sum(parts.seconds.values())
    shown = ", ".join(f"{part} {value:.2f} s" for part, value in sorted(parts.seconds.items(), key=lambda i: -i[1]))
    print(f"  the frame's run in parts ({total:.2f} s, instrumented): {shown}, the rest (linear layers, norms, "
          f"rotary, MLPs, tokenising, the next-token choice) {rest:.2f} s")
    print("  the trace holds: " + ", ".join(f"{part} {mib:,.1f} MiB" for part, mib in held(trace).items()))


def main() -> None:
    print(f"{torch.get_num_threads()} threads; native kernel "
          f"{'built' if native.attention_rows() is not None else 'not built (torch ops)'}")
    for model_id, length in cases():
        rounds = int(os.environ.get("BENCH_ROUNDS", 1 if length > 4096 else 3))
        measure(model_id, length, rounds)


if __name__ == "__main__":
    main()
