"""Our attention equals torch.nn.MultiheadAttention with the same weights; masks behave exactly."""

import pytest
import torch
from torch import nn

from attention_atlas.model.core.masks import causal_mask, combine, padding_mask
from attention_atlas.model.scratch.attention import MultiHeadAttention, attention

D, H = 32, 4


def _pair() -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    ours = MultiHeadAttention(D, H).eval()
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


def _weights(mha: MultiHeadAttention, *args) -> tuple[torch.Tensor, torch.Tensor]:
    """Our output and head-averaged probabilities, read from the pattern hook."""
    seen = {}
    handle = mha.hook_pattern.register_forward_hook(lambda m, i, o: seen.setdefault("p", o))
    try:
        out = mha(*args)
    finally:
        handle.remove()
    return out, seen["p"].mean(dim=1)


@pytest.mark.parametrize("masked", [False, True])
def test_self_attention_matches_torch(masked: bool) -> None:
    ours, ref = _pair()
    x = torch.randn(2, 7, D)
    ids = torch.tensor([[5, 6, 7, 8, 9, 0, 0], [5, 6, 7, 8, 9, 4, 3]])
    mask = combine(padding_mask(ids, 0), causal_mask(7)) if masked else None  # (2, 1, 7, 7), True = attend
    out, avg = _weights(ours, x, None, mask)
    ref_mask = None if mask is None else ~mask[:, 0].repeat_interleave(H, dim=0)  # (2*H, 7, 7), True = blocked
    ref_out, ref_avg = ref(x, x, x, attn_mask=ref_mask, need_weights=True, average_attn_weights=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(avg, ref_avg, atol=1e-5, rtol=0)


@pytest.mark.parametrize("masked", [False, True])
def test_cross_attention_matches_torch(masked: bool) -> None:
    ours, ref = _pair()
    x, memory = torch.randn(2, 4, D), torch.randn(2, 6, D)
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 4, 5, 6, 7, 8]])
    mask = padding_mask(src, 0) if masked else None  # (2, 1, 1, 6)
    out, avg = _weights(ours, x, memory, mask)
    key_padding = None if mask is None else ~mask[:, 0, 0]  # (2, 6), True = padding
    ref_out, ref_avg = ref(x, memory, memory, key_padding_mask=key_padding, need_weights=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(avg, ref_avg, atol=1e-5, rtol=0)


def test_rows_sum_to_one_and_masked_entries_are_exactly_zero() -> None:
    q, k, v = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 6, 8), torch.randn(3, 2, 6, 8)
    mask = torch.rand(3, 1, 5, 6) > 0.5
    mask[..., 0] = True  # every query keeps a key
    _, p = attention(q, k, v, mask)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 2, 5))
    assert bool((p.masked_select(~mask.expand_as(p)) == 0).all())
    assert bool((p.masked_select(mask.expand_as(p)) > 0).all())


def test_attention_output_is_probability_weighted_values() -> None:
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    out, p = attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)  # sqrt(d_k) = 2
    torch.testing.assert_close(p, expected)
    torch.testing.assert_close(out, expected @ v)
