"""The cost of finding a circuit: `python -m bench.circuit`.

SmolLM2 on a 20-token pair of prompts (the names sentence, " Mary" and " John" swapped in the corrupted one): EAP-IG
with 5 steps (the clean and the corrupted run through the model as its graph, the graph proven on them, then the
five interpolated runs' gradients in one batch) and EAP (one gradient), against one plain forward pass of the prompt,
after a warm-up; then the faithfulness curve (12 circuits evaluated in batches). Target: EAP-IG under a minute on a
2-core CPU.

Output: the graph's size, the seconds of each, and each as a multiple of one forward pass. BENCH_MODEL picks another
model.
"""

from __future__ import annotations

import os
import time

import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.circuit import find_circuit
from attention_atlas.model.registry import load_runner

CLEAN = "When Mary and John went to the store on a sunny morning, John gave a big cold drink to"  # 20 tokens
CORRUPTED = "When Mary and John went to the store on a sunny morning, Mary gave a big cold drink to"
CURVE = (0, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000)  # and every edge


def seconds(work, repeat: int = 1) -> tuple[float, object]:
    """The least of `repeat` timings of `work()` (the machine is shared: the least is the work's own), its result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    runner = load_runner(os.environ.get("BENCH_MODEL", "smollm2"))
    trace = runner.run(CORRUPTED, None, RunOptions(hooks=()))
    print(f"Circuits, {runner.facts.model_id}, {len(trace.ids)} tokens, {torch.get_num_threads()} threads:")
    find_circuit(runner, CLEAN, CORRUPTED, " Mary", " John", "EAP")  # warm-up
    forward, _ = seconds(lambda: runner.patched_outcomes(trace, {}, [None]), repeat=5)
    ig, found = seconds(lambda: find_circuit(runner, CLEAN, CORRUPTED, " Mary", " John", "EAP-IG", 5), repeat=3)
    eap, _ = seconds(lambda: find_circuit(runner, CLEAN, CORRUPTED, " Mary", " John", "EAP"), repeat=3)
    sizes = [n for n in CURVE if n < len(found.scores)] + [len(found.scores)]
    curve_time, curve = seconds(lambda: found.faithfulness(sizes))
    print(f"  the graph: {len(found.graph.sources)} nodes, {len(found.scores):,} edges")
    print(f"  one forward pass: {forward * 1000:.0f} ms")
    print(f"  EAP-IG, 5 steps: {ig:.1f} s ({ig / forward:.0f}x one forward pass)")
    print(f"  EAP: {eap:.1f} s ({eap / forward:.0f}x one forward pass)")
    print(f"  the faithfulness curve, {len(sizes)} circuits: {curve_time:.1f} s ({curve_time / forward:.0f}x one "
          "forward pass)")
    print("  faithfulness: " + ", ".join(f"{n}: {value:.2f}" for n, value in zip(sizes, curve, strict=True)))


if __name__ == "__main__":
    main()
