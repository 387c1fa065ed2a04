"""Choosing where a model runs, and recognising when a GPU ran out of memory."""

from __future__ import annotations

import torch

from attention_atlas.model.core.errors import UserError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PRECISION_CHOICES = ("auto", *PRECISIONS)
SPREAD = "spread"  # a Hugging Face model's layers over the GPUs, the CPU and the disk (model/hf/placement.py)


def available_devices() -> list[str]:
    """Devices this machine has, best first."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if torch.backends.mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def pick_device(preference: str = "auto") -> torch.device:
    """auto: CUDA, then MPS, then CPU. An explicit device that is missing is a ValueError."""
    if preference not in DEVICE_CHOICES:
        raise UserError(f"device must be one of {', '.join(DEVICE_CHOICES)}, not {preference!r}")
    available = available_devices()
    if preference == "auto":
        return torch.device(available[0])
    if preference not in available:
        raise UserError(f"{preference} is not available on this machine; available: {', '.join(available)}")
    return torch.device(preference)


def pick_precision(preference: str, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on a CUDA GPU that has it, else float16 on a GPU, float32 on the CPU (a CPU computes
    bfloat16 and float16 slowly, and float32 is what the models are checked against); or the one asked for."""
    if preference not in PRECISION_CHOICES:
        raise UserError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, not {preference!r}")
    if preference != "auto":
        return PRECISIONS[preference]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16 if device.type == "mps" else torch.float32


def precision_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def is_out_of_memory(error: BaseException) -> bool:
    """True for a CUDA/MPS out-of-memory error."""
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def free_accelerator_memory() -> None:
    """Give cached GPU memory back after an out-of-memory error."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if torch.backends.mps.is_available():
        torch.mps.empty_cache()
