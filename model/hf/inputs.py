"""What a causal LM reads under a mask of the app's own."""

from __future__ import annotations

from typing import Any

import torch

from attention_atlas.model.core.masks import additive_mask


def masked_inputs(input_ids: torch.Tensor, allowed: torch.Tensor, dtype: torch.dtype) -> dict[str, Any]:
    """The keyword arguments of a causal LM's forward pass over input_ids (batch, len) under `allowed` (batch or 1,
    1, len, len) bool: the 4D additive mask and each token's position 0..len-1, given because models that count
    positions along a 2D mask (OPT) cannot count them along a 4D one."""
    positions = torch.arange(input_ids.size(1), device=input_ids.device).expand(input_ids.size(0), -1)
    return {"input_ids": input_ids, "attention_mask": additive_mask(allowed.to(input_ids.device), dtype),
            "position_ids": positions}
