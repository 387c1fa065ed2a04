"""Moving what a capture keeps to the host while the forward pass goes on, waiting for it once at the end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import BFLOAT16_BITS, RowScaled, row_steps
from attention_atlas.model.core.attention.source import PatternSource

_NOT_IN_NUMPY = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
SIXTEEN_BITS = (torch.bfloat16, torch.float16)  # a model computing in one of these: its sources kept in it
FULL_PRECISION_BYTES = 256 << 20  # a float32 run whose queries and keys would take more than this keeps them in 16
# bits (RowScaled: within 4e-4 of eager's patterns on SmolLM2, float16 5.8e-3, bfloat16 4.4e-2): a tenth of the trace
# cache's default budget. SmolLM2 keeps float32 up to 2,912 tokens; a 4-layer model of its shape at 32,768 tokens
# (384 MiB in float32) keeps 16 bits.


def sixteen_bits(layer_bytes: int, layers: int, computed_in: torch.dtype) -> bool:
    """Whether a run of a model computing in `computed_in` keeps its sources as RowScaled: a float32 run whose
    `layers` pattern sources of `layer_bytes` (one layer's float32 queries and keys) exceed FULL_PRECISION_BYTES."""
    return computed_in not in SIXTEEN_BITS and layer_bytes * layers > FULL_PRECISION_BYTES


class HostCopies:
    """Tensors moved to the host as a capture reaches them. A CPU tensor is shared, not copied. A CUDA tensor is
    copied into pinned memory without waiting, so the GPU can reuse its memory while the forward pass goes on, and
    all copies are awaited once (`wait`): one synchronous copy per tensor into pageable memory cost 10x on an H100.
    Types numpy lacks (bfloat16) become float32 first, on their device. A CUDA tensor's array must not be read
    before `wait()`."""

    def __init__(self) -> None:
        self._shared: dict[int, tuple[torch.Tensor, np.ndarray]] = {}  # id -> (the tensor, kept alive; its array)
        self._copying: set[torch.device] = set()  # the GPUs copies were started from

    def array(self, tensor: torch.Tensor, shared: bool = False, bits: bool = False) -> np.ndarray:
        """The host array of `tensor`; `shared`: a tensor several values hold (the mask every layer reads), moved
        once; `bits`: a bfloat16 tensor as its bits (uint16, `BFLOAT16_BITS`), not as float32."""
        if shared and id(tensor) in self._shared:
            return self._shared[id(tensor)][1]
        moved = tensor.detach()
        if bits and moved.dtype == torch.bfloat16:
            moved = moved.view(torch.int16)  # torch has no uint16 to copy in: the same bits, read as uint16 below
        elif moved.dtype in _NOT_IN_NUMPY:
            moved = moved.float()
        if moved.is_cuda:
            host = torch.empty(moved.shape, dtype=moved.dtype, pin_memory=True)
            host.copy_(moved, non_blocking=True)
            self._copying.add(moved.device)
            moved = host
        array = moved.cpu().numpy()  # CPU: a view; MPS and others: a copy
        if bits and tensor.dtype == torch.bfloat16:
            array = array.view(BFLOAT16_BITS)
        if shared:
            self._shared[id(tensor)] = (tensor, array)
        return array

    def source(self, source: PatternSource, computed_in: torch.dtype = torch.float32, scaled: bool = False
               ) -> PatternSource:
        """A pattern's source with its arrays on the host (the mask and bias every layer shares, moved once); it
        still computes on its device. Its queries and keys are kept in the 16 bits the model computed them in, where
        it ran in bfloat16 or float16 (`computed_in`): exactly the numbers attention read, in half float32's bytes;
        `scaled` (a float32 run's, `sixteen_bits`): as RowScaled, int16 steps of a float32 scale a row."""
        if computed_in in SIXTEEN_BITS:
            query, key = source.query.to(computed_in), source.key.to(computed_in)  # exact: made from those numbers
        elif scaled:
            query, key = (RowScaled(*(self.array(part) for part in row_steps(t))) for t in (source.query, source.key))
            return replace(source, query=query, key=key, **self._beside(source))
        else:
            query, key = source.query, source.key
        return replace(source, query=self.array(query, bits=True), key=self.array(key, bits=True),
                       **self._beside(source))

    def _beside(self, source: PatternSource) -> dict[str, np.ndarray | None]:
        """The host arrays of a source's mask, bias (shared by the layers: moved once) and sinks."""
        return dict(allowed=self.array(source.allowed, shared=True),
                    bias=None if source.bias is None else self.array(source.bias, shared=True),
                    sinks=None if source.sinks is None else self.array(source.sinks))

    def wait(self) -> None:
        """Wait for every copy started."""
        for device in self._copying:
            torch.cuda.synchronize(device)
        self._copying.clear()
