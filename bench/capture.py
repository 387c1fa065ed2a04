"""Cost of capturing every hook point: `python -m bench.capture`.

For each shipped toy model, the same forward pass with and without capture(hooks=all), run
alternately (so machine noise hits both alike), median of RUNS (50) runs each, printed as a ratio.
Target: ratio <= 1.10.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import torch

from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.masks import causal_mask, combine, padding_mask
from attention_atlas.model.scratch.transformer import EncoderDecoder
from attention_atlas.model.toy.evaluate import pad_batch
from attention_atlas.model.toy.store import ToyModel, available_toys, load_toy

RUNS = 50


def forward_fn(toy: ToyModel, batch_size: int) -> Callable[[], torch.Tensor]:
    """One forward pass of `batch_size` copies of the task's first example with its target."""
    source, target = toy.task.sample(random.Random(0))
    tok, model = toy.tokenizer, toy.model
    if isinstance(model, EncoderDecoder):
        src = pad_batch([toy.encode_source(source)] * batch_size, tok.pad_id)
        tgt = pad_batch([[tok.bos_id, *toy.encode_target(target)[:-1]]] * batch_size, tok.pad_id)
        src_mask, tgt_mask = padding_mask(src, tok.pad_id), causal_mask(tgt.size(1))
        return lambda: model(src, tgt, src_mask, tgt_mask, src_mask)
    seq = pad_batch([toy.encode_source(source) + toy.encode_target(target)[:-1]] * batch_size, tok.pad_id)
    mask = combine(padding_mask(seq, tok.pad_id), causal_mask(seq.size(1)))
    return lambda: model(seq, mask)


def median_times(toy: ToyModel, run: Callable[[], torch.Tensor]) -> tuple[float, float]:
    """Median seconds of the bare forward and of the captured forward, interleaved."""
    bare, captured = [], []
    for _ in range(3):  # warm-up
        with torch.inference_mode():
            run()
        capture(toy.model, toy.model.hook_points, None, run)
    for _ in range(RUNS):
        start = time.perf_counter()
        with torch.inference_mode():
            run()
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        capture(toy.model, toy.model.hook_points, None, run)
        captured.append(time.perf_counter() - start)
    return statistics.median(bare), statistics.median(captured)


def main() -> None:
    print(f"{'model':<18}{'batch':>6}{'hooks':>7}{'bare ms':>10}{'capture ms':>12}{'ratio':>8}")
    for task in available_toys():
        toy = load_toy(task)
        for batch_size in (1, 32):
            bare, captured = median_times(toy, forward_fn(toy, batch_size))
            print(f"toy-{task:<14}{batch_size:>6}{len(toy.model.hook_points):>7}{bare * 1e3:>10.2f}"
                  f"{captured * 1e3:>12.2f}{captured / bare:>8.2f}")


if __name__ == "__main__":
    main()
