"""What one layer's attention read, reported by the Hugging Face attention function while a capture runs
(model/hf/heads.py): the pattern's source, and the layer's output computed from the probabilities a summary reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from attention_atlas.model.core.attention.row_reduction import ReducedRows, RowLayout
from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.source import PatternSource, kept_dtype


@dataclass
class PatternInputs:
    """What attention read, as torch tensors on the model's device (batch kept), until the capture ends; and the
    output, where the capture computed it from the pattern it summarised (`summary_rows`)."""

    query: torch.Tensor  # (batch, heads, q_len, d_head)
    key: torch.Tensor  # (batch, kv_heads, k_len, d_head)
    value: torch.Tensor  # (batch, kv_heads, k_len, d_value): d_value may differ from d_head (DeepSeek's MLA)
    scale: float
    mask: torch.Tensor | None  # additive (batch or 1, 1, q_len, >= k_len): the dtype's minimum where hidden
    bias: torch.Tensor | None  # (batch or 1, heads, q_len, k_len) or None
    softcap: float | None = None  # scores capped to c tanh(score / c) before the mask (Gemma 2)
    sinks: torch.Tensor | None = None  # (heads,): a learned sink logit a head, in every row's softmax (GPT-OSS)
    output: torch.Tensor | None = None  # (batch, q_len, heads, d_value) in the query's dtype, once computed

    def summary_rows(self, source: PatternSource, layout: RowLayout, scratch: Scratch) -> Iterator[ReducedRows]:
        """The row blocks of run 0 of `source` (this layer's) reduced for a summary, computed in `scratch`. For a
        batch of one run they also make attention's output, set as `output` once every block is read: the fused
        kernel then has nothing left to do, and the layer's probabilities are computed once, not once for the
        forward pass and again for the summary."""
        if len(self.query) > 1:
            yield from source[0].reduced_rows(layout, scratch=scratch)
            return
        heads, q_len = self.query.shape[1:3]
        output = torch.empty(heads, q_len, self.value.size(-1), device=self.query.device, dtype=source.products_dtype)
        yield from source[0].reduced_rows(layout, self.value[0], output, scratch)
        self.output = output.to(self.query.dtype).transpose(0, 1)[None]

    def source(self, converted: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> PatternSource:
        """A PatternSource of tensors on the model's device, batch kept (the mask and the bias: batch or 1): queries
        and keys in float32, or in bfloat16 where a bfloat16 model runs off the CPU (`kept_dtype`: its summary's
        products then run in bfloat16; a pattern is computed from them in float32, exactly, either way), the mask as
        bool. `converted` holds what was
        converted already, by tensor (kept alive with it): every layer reads the same mask and bias tensors,
        converted once for all."""

        def once(tensor: torch.Tensor, convert: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
            if id(tensor) not in converted:
                converted[id(tensor)] = (tensor, convert(tensor))
            return converted[id(tensor)][1]

        q_len, k_len = self.query.size(-2), self.key.size(-2)
        if self.mask is None:
            allowed = torch.ones(1, q_len, k_len, dtype=torch.bool, device=self.query.device)
        else:
            minimum = torch.finfo(self.mask.dtype).min
            allowed = once(self.mask, lambda m: m[:, 0, :, :k_len] > minimum / 2)  # (batch or 1, q_len, k_len)
        bias = None if self.bias is None else once(self.bias, lambda b: b.float())
        dtype = kept_dtype(self.query.dtype, self.query.device)
        sinks = None if self.sinks is None else self.sinks.detach().float().contiguous()
        return PatternSource(query=self.query.to(dtype), key=self.key.to(dtype), scale=self.scale, allowed=allowed,
                             bias=bias, softcap=self.softcap, sinks=sinks, device=str(self.query.device))
