"""The cost of scanning every head: `python -m bench.head_scan`.

For SmolLM2 (270 heads) and MiniLM (72 heads) on a short prompt, the Ablate heads page's scan
(model/inspect/ablation.py `scan_heads`): batched as the page runs it (about TOKENS_PER_PASS tokens a pass), and
one head per pass, timed side by side in one run after a warm-up. Target: SmolLM2's full scan under a minute on
a 2-core CPU.

Output: seconds each way, their ratio, and whether both ways ranked the heads the same.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS, every_head, scan_heads
from attention_atlas.model.registry import load_runner

TEXTS = {"smollm2": "The capital of France is", "minilm": "The quick brown fox jumps over the lazy dog."}


def main() -> None:
    print(f"Head scan on {torch.get_num_threads()} threads, zero ablation, batched = ~{TOKENS_PER_PASS} tokens a pass:")
    for model_id, text in TEXTS.items():
        runner = load_runner(model_id)
        trace = runner.run(text, options=RunOptions(hooks=()))
        scan_heads(runner, trace, "zero", tokens_per_pass=TOKENS_PER_PASS)  # warm-up
        timings, scans = {}, {}
        for label, per_pass in (("batched", TOKENS_PER_PASS), ("one head a pass", 1)):
            start = time.perf_counter()
            scans[label] = scan_heads(runner, trace, "zero", tokens_per_pass=per_pass)
            timings[label] = time.perf_counter() - start
        same = [h for h, _ in scans["batched"].ranked()[:10]] == [h for h, _ in scans["one head a pass"].ranked()[:10]]
        largest = max(float(np.abs(scans["batched"].effects[s] - scans["one head a pass"].effects[s]).max())
                      for s in scans["batched"].effects)
        print(f"  {model_id}: {len(every_head(trace))} heads, {len(trace.ids)} tokens: batched "
              f"{timings['batched']:.1f} s, one head a pass {timings['one head a pass']:.1f} s, ratio "
              f"{timings['one head a pass'] / timings['batched']:.2f}x; same top 10: {same} "
              f"(largest difference {largest:.1e})")


if __name__ == "__main__":
    main()
