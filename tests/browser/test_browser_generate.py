"""The Generate page in a real browser: five tokens step by step with toy-date and with SmolLM2, each new token's
attention row drawn over a context one longer than the step before, and nothing logs an error."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import expect

from app_browser.page import figure, heatmap_values, screenshots, wait_idle
from app_browser.server import ARTIFACTS


def _step_five_times(page, layers: int, heads: int, start_context: int, name: str) -> None:
    """Step 5 tokens; after each, the step's rows cover the context so far (one more key each step), every row
    a distribution over it (sums to 1)."""
    for step in range(1, 6):
        page.get_by_role("button", name="Step").click()
        wait_idle(page)
        title = f"Step {step} · self-attention over the context"
        expect(figure(page, f"{title} · mean over heads")).to_be_visible()
        mean = np.array(heatmap_values(page, f"{title} · mean over heads"), dtype=float)
        per_head = np.array(heatmap_values(page, f"{title} · layer 0, every head"), dtype=float)
        assert mean.shape == (layers, start_context + step - 1) and per_head.shape == (heads, mean.shape[1])
        np.testing.assert_allclose(per_head.sum(axis=1), 1, atol=2e-3)  # float16 rows
        np.testing.assert_allclose(per_head.mean(axis=0), mean[0], atol=1e-3)
        expect(figure(page, f"Top 10 at step {step}")).to_be_visible()
    figure(page, "every head").first.screenshot(path=str(ARTIFACTS / f"generate-{name}-heads.png"))
    screenshots(page, f"generate-{name}")


@pytest.mark.opens("generate", model="toy-date", text="14 feb 1999")
def test_five_steps_with_toy_date(page) -> None:
    expect(page.get_by_role("heading", name="Generate")).to_be_visible()
    _step_five_times(page, layers=2, heads=4, start_context=1, name="toy-date")
    cross = np.array(heatmap_values(page, "Step 5 · cross-attention over the source · mean"), dtype=float)
    assert cross.shape == (2, 12)  # 11 characters and </s>
    expect(page.get_by_text("14 feb 1999 ⟶ 1999-")).to_be_visible()
    assert page.console_errors == []


@pytest.mark.opens("generate", model="smollm2", text="The capital of France is")
def test_five_steps_with_smollm2(page) -> None:
    _step_five_times(page, layers=30, heads=9, start_context=5, name="smollm2")
    expect(page.get_by_text("The capital of France is Paris.")).to_be_visible()
    assert page.console_errors == []
