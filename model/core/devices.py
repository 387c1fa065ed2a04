"""Choosing where a model runs, and recognising when a GPU ran out of memory."""

from __future__ import annotations

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


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
        raise ValueError(f"device must be one of {', '.join(DEVICE_CHOICES)}, not {preference!r}")
    available = available_devices()
    if preference == "auto":
        return torch.device(available[0])
    if preference not in available:
        raise ValueError(f"{preference} is not available on this machine; available: {', '.join(available)}")
    return torch.device(preference)


def is_out_of_memory(error: BaseException) -> bool:
    """True for a CUDA/MPS out-of-memory error."""
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def free_accelerator_memory() -> None:
    """Give cached GPU memory back after an out-of-memory error."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if torch.backends.mps.is_available():
        torch.mps.empty_cache()
