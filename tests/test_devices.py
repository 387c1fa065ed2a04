"""Device choice: auto takes the best available; a device that is missing is a clear error."""

import pytest
import torch

from model.core.devices import available_devices, is_out_of_memory, pick_device


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
