"""Step-by-step generation cost: `python -m bench.generation`.

SmolLM2 greedy from "The capital of France is", TOKENS tokens (its end token ignored, so that every run makes
as many), three ways: the Generate page's stepper with its KV cache, capturing every layer's attention row of
each new token; the same stepper re-reading the whole sequence at every step; plain `model.generate` (eager
attention, KV cache, no capture; end token suppressed). Each timed once after one warm-up round.

Output: seconds for each, and the ratio stepper-with-cache / generate (target <= 1.3), and whether the two
steppers chose the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from attention_atlas.model.core.generation.decoding import Stepper, generate
from attention_atlas.model.core.generation.sampling import DecodeSettings, choose_next
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner

TOKENS = 50
PROMPT = "The capital of France is"


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def main() -> None:
    runner = load_runner("smollm2")

    def stepper(use_cache: bool) -> Stepper:
        made = runner.stepper(PROMPT, RunOptions(), use_cache=use_cache)
        made.eos_ids = set()  # as many tokens as generate below
        return made

    def steps(use_cache: bool) -> list[int]:
        greedy = DecodeSettings()
        return [s.token_id for s in generate(stepper(use_cache), [], TOKENS, lambda x, i: choose_next(x, greedy, i))]

    ids = torch.tensor([runner.text.encode(PROMPT)])
    for _ in range(2):  # the first round warms up
        cached_s, cached = _timed(lambda: steps(True))
        full_s, full = _timed(lambda: steps(False))
        plain_s, _ = _timed(lambda: runner.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False,
            pad_token_id=runner.text.pad_id()))
    print(f"{TOKENS} tokens of SmolLM2 on {torch.get_num_threads()} threads:")
    print(f"  stepper, KV cache, attention rows captured: {cached_s:.2f} s")
    print(f"  stepper, whole sequence every step:        {full_s:.2f} s")
    print(f"  model.generate (eager), nothing captured:  {plain_s:.2f} s")
    print(f"  ratio cached stepper / generate: {cached_s / plain_s:.2f} (target <= 1.3); same tokens both ways: "
          f"{cached == full}")


if __name__ == "__main__":
    main()
