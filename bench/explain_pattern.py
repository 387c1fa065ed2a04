"""The cost of taking a whole row of scores apart: `python -m bench.explain_pattern`.

SmolLM2 on a 2,048-token text, the last query of head 0 of its last layer (the most parts: every head and MLP of the
29 layers under it): the run recording nothing, the run every page makes (the patterns kept as what they are computed
from), the run recording what the split reads (`score_options`), and the split itself (`explain_pattern`'s work on
that run: both sides of every one of the 2,048 scores), side by side in one run, each run the quicker of two after a
warm-up, each as a multiple of the run recording nothing. Target: seconds on a 2-core CPU. BENCH_MODEL, BENCH_TOKENS
and BENCH_LAYER pick others.

Output: the seconds of each, the ratios, the number of parts a side, and the largest difference between a column's
parts summed and the model's score (the split's own check, which refuses beyond 1e-4 of the score's size).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.score_parts import explain_pattern
from attention_atlas.model.inspect.score_setup import score_options
from attention_atlas.model.registry import load_runner

PASSAGE = ("The river rose through the night, and by morning the old bridge stood in water to its rails. People came "
           "down from the hill with ropes and boats, and the baker opened his ovens to anyone who was cold. ")


def text_of(runner, tokens: int) -> str:
    """A text of about `tokens` tokens (the passage repeated, cut at a token)."""
    tokenizer = runner.text.tokenizer
    ids = tokenizer(PASSAGE * (tokens // 20), add_special_tokens=False)["input_ids"][:tokens]
    return tokenizer.decode(ids)


def seconds(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def main() -> None:
    runner = load_runner(os.environ.get("BENCH_MODEL", "smollm2"))
    layer = int(os.environ.get("BENCH_LAYER", runner.facts.n_decoder_layers - 1))
    text = text_of(runner, int(os.environ.get("BENCH_TOKENS", 2048)))
    options = score_options(runner, "decoder.attn", layer)
    chosen = {"recording nothing": RunOptions(hooks=()), "recording the patterns (as the pages)":
              RunOptions(hooks=("*.hook_pattern",)), "recording what the split reads": options}
    runner.run(text, None, options)  # warm-up
    run: dict[str, float] = {}
    for name, chosen_options in chosen.items():
        for _ in range(2):  # the quicker of two; the last trace kept (each holds every layer's parts)
            took, trace = seconds(lambda o=chosen_options: runner.run(text, None, o))
            run[name] = min(took, run.get(name, took))
    bare = run["recording nothing"]
    query = len(trace.ids) - 1
    split, row = seconds(lambda: explain_pattern(runner, trace, "decoder.attn", layer, 0, query))
    off = max(float(np.abs(row.query_shares.sum(0) - row.scores).max()),
              float(np.abs(row.key_shares.sum(0) - row.scores).max()))
    print(f"explain_pattern, {runner.facts.model_id}, {len(trace.ids)} tokens, layer {layer} head 0, query {query}, "
          f"{torch.get_num_threads()} threads:")
    for name, took in run.items():
        print(f"  the run {name}: {took:.2f} s ({took / bare:.2f}x)")
    print(f"  the split of {len(row.keys)} scores ({len(row.query_parts)} query parts, {len(row.key_parts)} key "
          f"parts): {split:.2f} s ({split / bare:.2f}x)")
    whole = run["recording what the split reads"] + split
    print(f"  explain_pattern in all (its run and the split): {whole:.2f} s ({whole / bare:.2f}x the run recording "
          "nothing)")
    print(f"  largest difference of a column's parts from the model's score: {off:.1e} "
          f"(scores up to {np.abs(row.scores).max():.1f})")


if __name__ == "__main__":
    main()
