"""What capturing every layer's attention costs: `python -m bench.hf_capture`.

MiniLM (512 tokens) and SmolLM2 (512 and 2,048 tokens; bench/long_capture.py: 8,192), four ways, alternated in
one run, median of RUNS:
- sdpa: the same weights loaded with transformers' "sdpa" attention, nothing captured (the fast forward);
- capture: the app's run of the Attention page's input (every layer's `hook_pattern`): the fused forward
  keeping each pattern's source (model/core/attention/source.py), moved to the host;
- eager capture: what capture cost before: transformers' eager attention with `output_attentions`, every
  pattern moved to the host as float16, one copy per tensor;
- capture + summary: as the app's run makes it: the capture, with each layer's attention computed in blocks of
  query rows whose probabilities make both the layer's output and the reduction every view of the whole text reads
  (model/core/attention/summary.py: the model view's thumbnails, the head statistics, each layer's rollout factor;
  no fused kernel call; the rollout's product is made when its view asks), each block's softmax and reductions in
  the native CPU kernel (model/core/attention/native);
- the same with torch ops only: where no C compiler built the kernel (and on a GPU);
Also the bytes a trace holds for its attention: the sources vs the float16 patterns.

Targets: capture <= 1.2 x sdpa at 512 and 2,048 tokens, thumbnails and statistics counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.masks import additive_mask, self_attention_mask
from attention_atlas.model.core.trace.trace import distinct_nbytes
from attention_atlas.model.hf import packaged
from attention_atlas.model.hf.runner import HFRunner
from attention_atlas.model.registry import load_runner

SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "
CASES = (("minilm", 512), ("smollm2", 512), ("smollm2", 2048))
RUNS = {512: 7, 2048: 3}


def inputs(runner: HFRunner, length: int) -> dict[str, torch.Tensor]:
    """Exactly `length` tokens of repeated text, with the causal or full mask the model expects."""
    ids = runner.tokenizer(SENTENCE * (length // 8), add_special_tokens=False)["input_ids"][:length]
    allowed = self_attention_mask(length, length, runner.family.kind == "decoder", ())
    return {"input_ids": torch.tensor([ids]), "attention_mask": additive_mask(allowed, runner.model.dtype)}


def timed(work: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def folder(model_id: str) -> Path:
    return packaged.minilm_path() if model_id == "minilm" else packaged.smollm2_folder()


def measure(model_id: str, length: int) -> str:
    """One row of the table: the medians, their ratios, the model view's time and the bytes held."""
    runner = load_runner(model_id)
    cls = type(runner.model)
    sdpa = cls.from_pretrained(folder(model_id), attn_implementation="sdpa").eval()
    eager = cls.from_pretrained(folder(model_id), attn_implementation="eager").eval()
    batch = inputs(runner, length) | ({"logits_to_keep": 1} if runner.family.kind == "decoder" else {})

    def bare() -> None:
        with torch.inference_mode():
            sdpa(**batch)

    def ours() -> dict:
        return capture(runner.model, runner.taps, ("*.hook_pattern",), lambda: runner.model(**batch))[1]

    def ours_summarised() -> dict:
        return capture(runner.model, runner.taps, ("*.hook_pattern",), lambda: runner.model(**batch), True)[1]

    def torch_summarised() -> dict:
        kernel, native.attention_rows = native.attention_rows, lambda: None
        try:
            return ours_summarised()
        finally:
            native.attention_rows = kernel

    def old() -> list[np.ndarray]:
        with torch.inference_mode():
            out = eager(**batch, output_attentions=True)
        return [a[0].to(torch.float16).numpy() for a in out.attentions]

    ways = (("sdpa", bare), ("capture", ours), ("summary", ours_summarised), ("torch ops", torch_summarised),
            ("eager", old))
    times: dict[str, list[float]] = {name: [] for name, _ in ways}
    results: dict[str, Any] = {}  # each way's result: the captures' dicts, eager's list of patterns
    for i in range(RUNS[length] + 1):
        for name, work in ways:
            seconds, results[name] = timed(work)
            if i:  # the first round warms up
                times[name].append(seconds)
    sources = [source[0] for source in results["capture"].values()]
    median = {name: statistics.median(values) for name, values in times.items()}
    kept = distinct_nbytes([a for s in sources for a in s.arrays()]) / 2**20
    held = sum(p.nbytes for p in results["eager"]) / 2**20
    return (f"{model_id:<9}{length:>7}{median['sdpa'] * 1e3:>9.0f}{median['capture'] * 1e3:>12.0f}"
            f"{median['capture'] / median['sdpa']:>8.2f}{median['eager'] * 1e3:>18.0f}"
            f"{median['eager'] / median['sdpa']:>8.2f}{median['summary'] * 1e3:>22.0f}"
            f"{median['summary'] / median['sdpa']:>8.2f}{median['torch ops'] * 1e3:>16.0f}"
            f"{median['torch ops'] / median['sdpa']:>8.2f}{kept:>10.1f}{held:>11.1f}")


def main() -> None:
    print(f"{torch.get_num_threads()} threads")
    print(f"{'model':<9}{'tokens':>7}{'sdpa ms':>9}{'capture ms':>12}{'/ sdpa':>8}{'eager capture ms':>18}"
          f"{'/ sdpa':>8}{'capture + summary ms':>22}{'/ sdpa':>8}{'(torch ops) ms':>16}{'/ sdpa':>8}{'kept MiB':>10}"
          f"{'eager MiB':>11}")
    print(f"native kernel: {'built' if native.attention_rows() is not None else 'not built (torch ops both ways)'}")
    for model_id, length in CASES:
        print(measure(model_id, length), flush=True)


if __name__ == "__main__":
    main()
