"""A run that runs out of GPU memory repeats on the CPU and says so (docs/robustness.md): the Hugging Face runner's
CPU copy (float32) gives the CPU's trace, whether the GPU gave out as the forward pass began or halfway through it, and
the model on the GPU is whole afterwards; a spread model has no CPU copy (docs/serving.md), so the error reaches the
caller. The GPU's running out is made by raising torch.OutOfMemoryError where it would come, not by filling an H100."""

from __future__ import annotations

import pytest
import torch

from attention_atlas.model.core.devices import PRECISIONS
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.placement import Placement
from attention_atlas.model.registry import load_runner
from tests.gpu.compare import BFLOAT16, FLOAT32, assert_same_hooks
from tests.gpu.models import DEVICE, PRECISION_NAMES, TEXT
from tests.tiny_hf import build

FALLBACK = "The CUDA ran out of memory; this run used the CPU instead."
EVERY_HOOK = RunOptions(hooks=("*",))


def out_of_memory(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


@pytest.mark.parametrize("where", ["as the pass begins", "in its second layer"])
@pytest.mark.parametrize("precision", PRECISION_NAMES)
def test_a_run_out_of_gpu_memory_repeats_on_the_cpu_and_says_so(tiny_folders, loaded, precision: str, where: str,
                                                                 monkeypatch) -> None:
    gpu = load_runner(str(tiny_folders["llama"]), device=DEVICE, precision=PRECISIONS[precision])  # no CPU copy yet
    reference = loaded("llama").run(TEXT, options=EVERY_HOOK)
    with monkeypatch.context() as patch:
        if where == "as the pass begins":
            patch.setattr(gpu.model, "forward", out_of_memory)
            trace = gpu.run(TEXT, options=EVERY_HOOK)
        else:
            handle = gpu.model.model.layers[1].register_forward_pre_hook(out_of_memory)
            try:
                trace = gpu.run(TEXT, options=EVERY_HOOK)
            finally:
                handle.remove()
    assert trace.fallback == FALLBACK and trace.facts.device == "cpu"
    assert trace.facts.precision == "float32"  # the CPU copy is float32, whatever the GPU's precision
    assert_same_hooks(trace, reference, FLOAT32)
    assert trace.output_text == reference.output_text
    again = gpu.run(TEXT, options=EVERY_HOOK)  # the GPU's model, its hooks and recorders left as they were
    assert not again.fallback and again.facts.device.startswith(DEVICE)
    assert_same_hooks(again, reference, FLOAT32 if precision == "float32" else BFLOAT16)


def test_an_error_that_is_not_out_of_memory_is_not_repeated(tiny_folders, monkeypatch) -> None:
    gpu = load_runner(str(tiny_folders["llama"]), device=DEVICE)

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu.model, "forward", broken)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        gpu.run(TEXT)


def test_a_spread_model_out_of_gpu_memory_says_so_without_a_cpu_copy(tmp_path, monkeypatch) -> None:
    folder = build("llama", tmp_path / "llama", num_hidden_layers=4)
    spread = load_runner(str(folder), placement=Placement(max_memory=(("0", 80_000), ("cpu", 1 << 30))))
    assert spread.facts.device == "cuda:0 + cpu"
    monkeypatch.setattr(spread.model, "forward", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        spread.run(TEXT)
