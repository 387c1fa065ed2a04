"""Device and precision choice: auto takes the best available; a device that is missing is a clear error."""

import numpy as np
import pytest
import torch

from attention_atlas.model.core.devices import available_devices, is_out_of_memory, pick_device, pick_precision


def test_auto_takes_the_best_available_device() -> None:
    assert pick_device("auto") == torch.device(available_devices()[0])
    assert available_devices()[-1] == "cpu"
    assert pick_device("cpu") == torch.device("cpu")


def test_missing_or_unknown_device() -> None:
    if "cuda" not in available_devices():
        with pytest.raises(ValueError, match=r"cuda is not available on this machine; available: .*cpu"):
            pick_device("cuda")
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, mps"):
        pick_device("tpu")


def test_out_of_memory_is_recognised() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("MPS backend out of memory"))
    assert not is_out_of_memory(RuntimeError("size mismatch"))


def test_auto_precision_is_float32_on_the_cpu_and_half_on_a_gpu(monkeypatch) -> None:
    assert pick_precision("auto", torch.device("cpu")) == torch.float32
    assert pick_precision("bfloat16", torch.device("cpu")) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert pick_precision("auto", torch.device("cuda")) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert pick_precision("auto", torch.device("cuda")) == torch.float16  # e.g. a V100 or T4
    assert pick_precision("auto", torch.device("mps")) == torch.float16
    assert pick_precision("float32", torch.device("cuda")) == torch.float32
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16, float16"):
        pick_precision("int8", torch.device("cpu"))


def test_a_model_loaded_in_bfloat16_says_so_and_reads_like_float32() -> None:
    """MiniLM's weights in bfloat16: the model card says it, and its attention is float32's to about 1e-2."""
    from attention_atlas.model.core.options import RunOptions
    from attention_atlas.model.registry import load_runner
    from attention_atlas.viz.outputs import model_card

    half = load_runner("minilm", precision=torch.bfloat16)
    full = load_runner("minilm")
    assert half.model.dtype == torch.bfloat16 and half.facts.precision == "bfloat16"
    assert model_card(half.facts).loc["precision", "value"] == "bfloat16"
    assert model_card(full.facts).loc["precision", "value"] == "float32"
    text = "The quick brown fox jumps over the lazy dog."
    patterns = [r.run(text, options=RunOptions()).attention["encoder.3.attn.hook_pattern"] for r in (half, full)]
    np.testing.assert_allclose(patterns[0].sum(-1), 1, atol=1e-2)
    difference = np.abs(patterns[0].astype(np.float32) - patterns[1].astype(np.float32)).max()
    assert 0 < difference < 0.05  # not the float32 model again, and close to it
