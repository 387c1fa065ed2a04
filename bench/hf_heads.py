"""Cost of the per-head attention function on the app's default capture: `python -m bench.hf_heads`.

MiniLM and SmolLM2 at 128 and 512 tokens, one process, runs interleaved in alternating order (machine
noise hits all alike), median of RUNS each: the default capture (every `hook_pattern`, as the app asks)
on the model loaded with plain eager attention (before per-head hooks) and on the same weights loaded
with ATTENTION (now), as a ratio (target: 1.00 within noise); and, for scale, the capture of every
attention hook (q, k, v, scores, pattern, z, rotary q/k) against the default one.
"""

from __future__ import annotations

import statistics
import time

import transformers

from bench.hf_capture import inputs
from model.core.capture import capture
from model.hf.heads import ATTENTION
from model.hf.runner import PACK_FROM_TOKENS, HFRunner
from model.registry import load_runner

RUNS = 20
DEFAULT, ALL_ATTENTION = ("*.hook_pattern",), ("*attn.hook_*",)


def measure(runner: HFRunner, length: int) -> tuple[float, float, float]:
    """Median seconds: default capture on eager, default capture on ATTENTION, every attention hook on ATTENTION."""
    assert runner.model.config._attn_implementation == ATTENTION
    eager = type(runner.model).from_pretrained(runner.model.name_or_path, attn_implementation="eager").eval()
    batch = inputs(runner, length)
    packed = {"decoder"} if runner.family.kind == "decoder" and length >= PACK_FROM_TOKENS else set()
    runs = [(model, runner.taps_for_run(model, packed), hooks)
            for model, hooks in ((eager, DEFAULT), (runner.model, DEFAULT), (runner.model, ALL_ATTENTION))]
    times: list[list[float]] = [[] for _ in runs]
    for i in range(RUNS + 2):
        order = list(zip(runs, times, strict=True))
        for (model, sites, hooks), kept in order[::-1] if i % 2 else order:  # neither always runs first
            start = time.perf_counter()
            capture(model, sites, hooks, lambda model=model: model(**batch))
            if i >= 2:  # the first two are warm-up
                kept.append(time.perf_counter() - start)
    before, after, heads = (statistics.median(t) for t in times)
    return before, after, heads


def main() -> None:
    transformers.utils.logging.set_verbosity_error()
    print(f"{'model':<10}{'tokens':>7}{'eager ms':>10}{'now ms':>9}{'ratio':>7}{'all attn ms':>13}{'ratio':>7}")
    for model_id in ("minilm", "smollm2"):
        runner = load_runner(model_id)
        for length in (128, 512):
            before, after, heads = measure(runner, length)
            print(f"{model_id:<10}{length:>7}{before * 1e3:>10.1f}{after * 1e3:>9.1f}{after / before:>7.3f}"
                  f"{heads * 1e3:>13.1f}{heads / after:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
