"""What spreading a model costs: `python -m bench.spread_capture`.

SmolLM2 (its float32 copy, 517 MB) loaded twice by the app's loader: whole on the CPU, and spread by accelerate
(model/hf/placement.py) under a CPU budget of a fraction of its weights, so that the other layers are read from the
disk (the model's own safetensors file) at every pass. Each run is the app's frame run (every layer's pattern, the
in-run summary) of the same text, the two models alternated, median of RUNS after a warm-up. Prints the weights each
holds in memory, the seconds a run takes and their ratio, and checks the two traces' patterns agree.

There is no target: a spread model trades time for memory. Settings: BENCH_TOKENS (default 512), BENCH_BUDGET (the
CPU budget as a share of the weights, default 0.3), BENCH_RUNS (default 5).
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf import packaged
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.placement import Placement

SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "


def resident_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights held in memory (an offloaded weight is on the meta device: not held)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type != "meta")


def main() -> None:
    length = int(os.environ.get("BENCH_TOKENS", "512"))
    share = float(os.environ.get("BENCH_BUDGET", "0.3"))
    runs = int(os.environ.get("BENCH_RUNS", "5"))
    folder = str(packaged.smollm2_folder())
    whole = load_hf_runner(folder, "smollm2")
    weights = resident_bytes(whole.model)
    spread = load_hf_runner(folder, "smollm2", placement=Placement(max_memory=(("cpu", int(weights * share)),)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; SmolLM2 float32, {length} tokens, "
          f"median of {runs} runs after a warm-up")
    print(f"where the spread model's layers are: {spread.facts.notes.get('where the layers are', 'one device')}")
    ids = whole.tokenizer(SENTENCE * (length // 8), add_special_tokens=False)["input_ids"][: length - 1]
    text = whole.tokenizer.decode(ids)
    options = RunOptions(summarised=True)
    seconds: dict[str, list[float]] = {"whole": [], "spread": []}
    traces = {}
    for round_ in range(runs + 1):
        for name, runner in (("whole", whole), ("spread", spread))[:: 1 if round_ % 2 else -1]:
            start = time.perf_counter()
            traces[name] = runner.run(text, options=options)
            if round_:
                seconds[name].append(time.perf_counter() - start)
    last = traces["whole"].n_layers("decoder.attn") - 1
    difference = float(np.abs(traces["whole"].pattern("decoder.attn", last)
                              - traces["spread"].pattern("decoder.attn", last)).max())
    print(f"check: the last layer's patterns differ by at most {difference:.2e}")
    print(f"{'model':<8}{'weights in memory':>20}{'s a run':>10}{'/ whole':>10}")
    base = statistics.median(seconds["whole"])
    for name, runner in (("whole", whole), ("spread", spread)):
        median = statistics.median(seconds[name])
        print(f"{name:<8}{resident_bytes(runner.model) / 2**20:>16.0f} MiB{median:>10.2f}{median / base:>10.2f}")


if __name__ == "__main__":
    main()
