"""The sinusoidal table equals the paper's formula; the masks follow the documented convention;
causal patterns pack into their lower triangle and back."""

import math

import numpy as np
import pytest
import torch

from attention_atlas.model.core.masks import (
    blocked_mask,
    causal_mask,
    check_every_query_sees_a_key,
    combine,
    padding_mask,
)
from attention_atlas.model.scratch.layers import sinusoidal_table
from attention_atlas.viz.masks import hidden_counts, hidden_reasons


@pytest.mark.parametrize("d_model", [8, 64, 512])
def test_positional_encoding_equals_formula(d_model: int) -> None:
    table = sinusoidal_table(600, d_model)
    for pos in (0, 1, 7, 100, 599):
        for i in (0, 1, d_model // 4, d_model // 2 - 1):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_first_row_alternates_zero_one() -> None:
    assert torch.equal(sinusoidal_table(1, 6)[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))


def test_padding_mask_hides_pad_keys() -> None:
    mask = padding_mask(torch.tensor([[5, 6, 0], [5, 0, 0]]), pad_id=0)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_is_lower_triangle() -> None:
    mask = causal_mask(4)[0, 0]
    assert mask.tolist() == [[i >= j for j in range(4)] for i in range(4)]


def test_blocked_mask_and_combination() -> None:
    mask = combine(causal_mask(3), blocked_mask(3, [(2, 0)]))[0, 0]
    assert mask.tolist() == [[True, False, False], [True, True, False], [False, True, True]]
    with pytest.raises(ValueError, match="outside the 3 x 3"):
        blocked_mask(3, [(3, 0)])
    assert combine(None, None) is None


def test_a_query_with_no_visible_key_is_refused() -> None:
    mask = blocked_mask(2, [(1, 0), (1, 1)])
    with pytest.raises(ValueError, match=r"query position\(s\) \[1\]"):
        check_every_query_sees_a_key(mask)
    check_every_query_sees_a_key(causal_mask(5))




@pytest.mark.parametrize(("causal", "window"), [(True, 0), (False, 0), (True, 3)])
def test_hidden_counts_count_the_cells_hidden_reasons_marks(causal: bool, window: int) -> None:
    """Counted a few rows at a time (here 3), without the whole-matrix arrays, they are the marked cells' counts."""
    rng = np.random.default_rng(7)
    for q_len, k_len in ((10, 10), (7, 12), (12, 5)):
        visible = rng.random((q_len, k_len)) < 0.6
        if causal:
            visible &= np.tril(np.ones((q_len, k_len), dtype=bool))
        if window:  # a sliding window: no key `window` or more back
            visible &= np.subtract.outer(np.arange(q_len), np.arange(k_len)) < window
        blocked = [(0, 0), (2, 1), (2, 1), (6, 4), (q_len + 3, 0), (1, 3)]  # a repeat, one outside, one causal
        for q, k in blocked[:4]:
            if q < q_len and k < k_len:
                visible[q, k] = False
        reasons = hidden_reasons(visible, causal, blocked, window)
        expected = {reason: int(cells.sum()) for reason, cells in reasons.items()}
        assert hidden_counts(visible, causal, blocked, window, rows_at_once=3) == expected
        assert sum(expected.values()) == int((~visible).sum())
        if window and q_len > window:
            assert reasons["window"][window, 0] and not reasons["window"][window - 1, 0]
