"""Cost of capturing attention + the residual stream on real models: `python -m bench.hf_capture`.

MiniLM and SmolLM2 at 128 and 512 tokens: the bare eager forward vs the same forward under capture
of every layer's attention pattern and hook_resid_post, alternated, median of RUNS each, as a ratio.
Target: ratio <= 1.10.
"""

from __future__ import annotations

import statistics
import time

import torch

from model.core.capture import capture
from model.hf.runner import PACK_FROM_TOKENS, HFRunner, additive_mask, self_attention_mask
from model.registry import load_runner

RUNS = 20
HOOKS = ("*.attn.hook_pattern", "*.hook_resid_post")
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "


def inputs(runner: HFRunner, length: int) -> dict[str, torch.Tensor]:
    """Exactly `length` tokens of repeated text, with the causal or full mask the model expects."""
    ids = runner.tokenizer(SENTENCE * (length // 8), add_special_tokens=False)["input_ids"][:length]
    allowed = self_attention_mask(length, length, runner.family.kind == "decoder", ())
    return {"input_ids": torch.tensor([ids]), "attention_mask": additive_mask(allowed, runner.model.dtype)}


def measure(runner: HFRunner, length: int) -> tuple[float, float]:
    model, batch = runner.model, inputs(runner, length)
    packed = runner.family.kind == "decoder" and length >= PACK_FROM_TOKENS
    sites = runner.taps_for_run(model, {"decoder"} if packed else set())  # stored as a run stores them
    bare_times, captured_times = [], []
    for i in range(RUNS + 2):
        start = time.perf_counter()
        with torch.inference_mode():
            model(**batch)
        bare = time.perf_counter() - start
        start = time.perf_counter()
        capture(model, sites, HOOKS, lambda: model(**batch))
        captured = time.perf_counter() - start
        if i >= 2:  # the first two are warm-up
            bare_times.append(bare)
            captured_times.append(captured)
    return statistics.median(bare_times), statistics.median(captured_times)


def main() -> None:
    print(f"{'model':<10}{'tokens':>7}{'bare ms':>10}{'capture ms':>12}{'ratio':>8}")
    for model_id in ("minilm", "smollm2"):
        runner = load_runner(model_id)
        for length in (128, 512):
            bare, captured = measure(runner, length)
            print(f"{model_id:<10}{length:>7}{bare * 1e3:>10.1f}{captured * 1e3:>12.1f}{captured / bare:>8.2f}")


if __name__ == "__main__":
    main()
