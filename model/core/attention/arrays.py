"""Where a pattern's arrays live: numpy on the host (a trace), torch tensors on the model's device (a capture)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

BFLOAT16_BITS = np.dtype(np.uint16)  # a host array of bfloat16 numbers (numpy has none) holds their bits as uint16
STEPS = 32767  # int16's largest: a row's largest magnitude, in `RowScaled`


@dataclass(frozen=True)
class RowScaled:
    """Float numbers kept in 16 bits a number (and 32 bits a row): each row along the last axis as int16 steps of its
    own float32 scale, the row's largest magnitude / STEPS. A number is off by at most half a step, 1/65,534 of its
    row's largest: in a dot product of a query and a key row the error is set by the large numbers, which keep their
    precision (float16 rounds every number to 1/2,048 of itself; SmolLM2's patterns from such queries and keys were off
    by up to 5.8e-3, from these 3.7e-4). Indexing takes rows (any axis but the last)."""

    steps: np.ndarray  # (..., n, d) int16
    scales: np.ndarray  # (..., n, 1) float32

    def __getitem__(self, index: object) -> RowScaled:
        return RowScaled(self.steps[index], self.scales[index])

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.steps.shape

    @property
    def dtype(self) -> np.dtype:
        return self.steps.dtype

    @property
    def nbytes(self) -> int:
        return self.steps.nbytes + self.scales.nbytes

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.steps, self.scales


def row_steps(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`RowScaled`'s int16 steps and float32 scales of a float tensor (..., n, d), on its device (the caller moves
    them to the host): a row of zeros has scale 1; a row holding NaN or an infinity scale NaN, so it reads back as NaN
    (its every score NaN, as eager attention's with it)."""
    largest = tensor.abs().amax(-1, keepdim=True).float()  # (..., n, 1)
    scales = torch.where(largest > 0, largest / STEPS, torch.ones_like(largest))
    scales = torch.where(torch.isfinite(largest), scales, torch.full_like(largest, float("nan")))
    return torch.round(torch.nan_to_num(tensor.float() / scales)).to(torch.int16), scales


Array = np.ndarray | torch.Tensor  # numpy on the host; torch on the model's device while a capture summarises
Kept = Array | RowScaled  # a pattern source's queries and keys: also RowScaled on the host (a long text's)


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


def as_tensor(array: Kept, device: torch.device) -> torch.Tensor:
    """A host array or a tensor as a tensor on `device` (a host array on the CPU: shared, not copied, read-only ones
    too (a Trace's): nothing writes into it; copied only where it reads memory backwards, as a kept mask's diagonals
    do); uint16 host arrays are bfloat16 bits (`BFLOAT16_BITS`); RowScaled numbers as float32, steps x scales."""
    if isinstance(array, torch.Tensor):
        return array.to(device)
    if isinstance(array, RowScaled):
        return as_tensor(array.steps, device).float().mul_(as_tensor(array.scales, device))
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
