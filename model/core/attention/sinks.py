"""Attention sinks (GPT-OSS): a learned logit a head, one more key in every row's softmax whose probability eager
attention drops, so a row's probabilities sum to 1 less the share the sink took."""

from __future__ import annotations

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import Array, as_index, as_tensor

LOG2_E = float(np.log2(np.e))  # the scores' unit: bits (model/core/attention/source.py computes them x log2 e)


def sink_bits(sinks: Array | None, head_ids: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """(len(head_ids),) float32 on `device`: the chosen heads' sink logits (sinks: (heads,)) in bits, or None."""
    if sinks is None:
        return None
    bits = as_tensor(sinks, device).float() * LOG2_E
    every = len(head_ids) == len(bits) and bool((np.asarray(head_ids) == np.arange(len(bits))).all())
    return bits if every else bits[as_index(np.asarray(head_ids), device)]
