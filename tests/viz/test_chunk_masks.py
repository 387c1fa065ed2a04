"""A chunked layer's mask (Llama 4): the keys outside each query's chunk are hidden "by the chunk", counted apart from
the causal mask, the sliding window and the custom mask, the same whether counted a few rows at a time or marked."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.viz.masks import REASON_TEXT, hidden_counts, hidden_reasons, mask_figure


@pytest.mark.parametrize(("causal", "window"), [(True, 0), (False, 0), (True, 4)])
def test_chunk_cells_are_marked_and_counted_alike(causal: bool, window: int) -> None:
    rng = np.random.default_rng(3)
    chunk = 3
    for q_len, k_len in ((10, 10), (7, 12), (12, 5)):
        q, k = np.arange(q_len)[:, None], np.arange(k_len)[None]
        same_chunk = q // chunk == k // chunk  # (q_len, k_len)
        visible = (rng.random((q_len, k_len)) < 0.8) & same_chunk
        if causal:
            visible &= k <= q
        if window:
            visible &= np.abs(q - k) < window
        blocked = [(1, 0), (4, 3), (5, 0), (q_len + 2, 0)]  # one in its chunk, one in another, one outside
        for query, key in blocked[:3]:
            if query < q_len and key < k_len:
                visible[query, key] = False
        reasons = hidden_reasons(visible, causal, blocked, window, chunk)
        expected = {reason: int(cells.sum()) for reason, cells in reasons.items()}
        assert hidden_counts(visible, causal, blocked, window, rows_at_once=4, chunk=chunk) == expected
        assert sum(expected.values()) == int((~visible).sum())
        apart = ~same_chunk & ~visible & (k <= q if causal else True) & (np.abs(q - k) < window if window else True)
        np.testing.assert_array_equal(reasons["chunk"], apart)
        assert "blocked" not in reasons or not reasons["blocked"][5, 0]  # hidden by its chunk first


def test_the_figure_names_the_chunk() -> None:
    visible = np.tril(np.ones((6, 6), dtype=bool)) & (np.arange(6)[:, None] // 3 == np.arange(6)[None] // 3)
    reasons = hidden_reasons(visible, True, chunk=3)
    assert set(reasons) == {"causal", "chunk"} and int(reasons["chunk"].sum()) == 9
    names = [trace.name for trace in mask_figure(visible, reasons, list("abcdef"), list("abcdef"), "t").data]
    assert REASON_TEXT["chunk"] in names
