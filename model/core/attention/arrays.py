"""Where a pattern's arrays live: numpy on the host (a trace), torch tensors on the model's device (a capture)."""

from __future__ import annotations

import warnings

import numpy as np
import torch

Array = np.ndarray | torch.Tensor  # numpy on the host; torch on the model's device while a capture summarises
BFLOAT16_BITS = np.dtype(np.uint16)  # a host array of bfloat16 numbers (numpy has none) holds their bits as uint16


def on_host(tensors: list[torch.Tensor]) -> tuple[np.ndarray, ...]:
    """Tensors (of one dtype) as host arrays: on the CPU, the tensors themselves; from another device, one copy of
    them all (a GPU waits once)."""
    if tensors[0].device.type == "cpu":
        return tuple(t.numpy() for t in tensors)
    flat = torch.cat([t.reshape(-1) for t in tensors]).cpu()
    parts = flat.split([t.numel() for t in tensors])
    return tuple(part.view(t.shape).numpy() for part, t in zip(parts, tensors, strict=True))


def run_of(array: Array, index: int) -> Array:
    """Run `index` of an array whose leading dimension is the batch, or 1 when every run shares it."""
    return array[index if len(array) > 1 else 0]


def as_tensor(array: Array, device: torch.device) -> torch.Tensor:
    """A host array or a tensor as a tensor on `device` (a host array on the CPU: shared, not copied, read-only ones
    too (a Trace's): nothing writes into it; copied only where it reads memory backwards, as a kept mask's diagonals
    do); uint16 host arrays are bfloat16 bits (`BFLOAT16_BITS`)."""
    if isinstance(array, torch.Tensor):
        return array.to(device)
    if any(stride < 0 for stride in array.strides):
        array = array.copy()
    with warnings.catch_warnings():  # torch's, where it shares a read-only host array (a Trace's): nothing writes it
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        tensor = torch.from_numpy(array)
    return (tensor.view(torch.bfloat16) if array.dtype == BFLOAT16_BITS else tensor).to(device)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`. To a CUDA GPU from pinned memory, without waiting: a plain copy from pageable memory
    makes the host wait for the GPU (one wait a tensor, torch's sync debug mode counts them)."""
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def as_index(rows: slice | np.ndarray, device: torch.device) -> slice | torch.Tensor:
    """Row positions as an index of a tensor on `device`."""
    return rows if isinstance(rows, slice) else torch.from_numpy(np.asarray(rows)).to(device)
