"""The cost of activation patching: `python -m bench.patching`.

SmolLM2 on a 20-token pair of prompts (the names sentence, " Mary" and " John" swapped in the corrupted one), every
kind (resid_pre, attn_out and mlp_out at each layer and position, each head's output): batched as the Attribution page
runs it (about TOKENS_PER_PASS tokens a pass), against one patched run a pass on the heads alone (the rest would take
minutes), and attribution patching's estimate of every cell (one backward pass), side by side in one run after a
warm-up, each as a multiple of one forward pass of the prompt. Target: all four kinds under a minute on a 2-core CPU.

Output: the runs, the seconds, the seconds per patched run each way, the ratios, and the estimate's correlation with
the patched runs, kind by kind. BENCH_MODEL picks another model.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.patching import attribution_patching, patch
from attention_atlas.model.registry import load_runner

CLEAN = "When Mary and John went to the store on a sunny morning, John gave a big cold drink to"  # 20 tokens
CORRUPTED = "When Mary and John went to the store on a sunny morning, Mary gave a big cold drink to"


def seconds(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def main() -> None:
    runner = load_runner(os.environ.get("BENCH_MODEL", "smollm2"))
    tokens = len(runner.run(CLEAN, None, RunOptions(hooks=())).ids)
    print(f"Activation patching, {runner.facts.model_id}, {tokens} tokens, {torch.get_num_threads()} threads:")
    patch(runner, CLEAN, CORRUPTED, " Mary", " John", kinds=("head_out",))  # warm-up
    forward, _ = seconds(lambda: [runner.run(CORRUPTED, None, RunOptions(hooks=())) for _ in range(5)])
    forward /= 5
    every, found = seconds(lambda: patch(runner, CLEAN, CORRUPTED, " Mary", " John"))
    estimating, estimate = seconds(lambda: attribution_patching(runner, CLEAN, CORRUPTED, " Mary", " John"))
    runs = sum(values.size for values in found.results.values())
    heads_batched, batched = seconds(lambda: patch(runner, CLEAN, CORRUPTED, " Mary", " John", kinds=("head_out",)))
    heads_alone, alone = seconds(lambda: patch(runner, CLEAN, CORRUPTED, " Mary", " John", kinds=("head_out",),
                                               tokens_per_pass=1))
    head_runs = found.results["head_out"].size
    same = float(np.abs(batched.results["head_out"] - alone.results["head_out"]).max())
    print(f"  one forward pass: {forward * 1000:.0f} ms")
    print(f"  every kind, batched (~{TOKENS_PER_PASS} tokens a pass): {runs} patched runs in {every:.1f} s "
          f"({every / forward:.0f}x one forward pass; {every / runs * 1000:.1f} ms a run)")
    correlations = ", ".join(
        f"{kind} {np.corrcoef(values.ravel(), estimate.results[kind].ravel())[0, 1]:.2f}"
        for kind, values in found.results.items())
    print(f"  attribution patching's estimate of every kind: {estimating:.1f} s ({estimating / forward:.0f}x one "
          f"forward pass); its correlation with the patched runs: {correlations}")
    print(f"  the heads ({head_runs} runs): batched {heads_batched:.1f} s, one a pass {heads_alone:.1f} s "
          f"(ratio {heads_alone / heads_batched:.2f}x; {heads_alone / head_runs * 1000:.0f} ms a run alone); "
          f"largest difference {same:.1e}")
    print(f"  clean {found.clean:+.3f}, corrupted {found.corrupted:+.3f}; the heads that restore most: "
          f"{np.argsort(-found.normalised('head_out'), axis=None)[:3].tolist()} (layer x 9 + head)")


if __name__ == "__main__":
    main()
