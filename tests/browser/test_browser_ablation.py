"""The Ablate heads page in a real browser: a scan of every head of toy-gpt-date with its progress, the top heads
ablated with one click, and SmolLM2's next token before and after; nothing logs an error."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import expect

from app_browser.page import figure, heatmap_values, screenshots, wait_idle


@pytest.mark.opens("ablation", model="toy-gpt-date", text="14 feb 1999")
def test_scan_then_ablate_the_top_heads_of_toy_gpt_date(page) -> None:
    expect(page.get_by_role("heading", name="Ablate heads")).to_be_visible()
    page.get_by_role("button", name="Scan every head (16)").click()
    wait_idle(page)
    title = "decoder self-attention: the change each head's ablation makes"
    expect(figure(page, title)).to_be_visible()
    grid = np.array(heatmap_values(page, title), dtype=float)
    assert grid.shape == (4, 4) and (grid >= 0).all() and grid.max() > 0
    page.get_by_role("button", name="Ablate the top 3 heads").click()
    wait_idle(page)
    expect(figure(page, "How each next-token distribution changed")).to_be_visible()
    expect(page.get_by_text("3 heads replaced by zero")).to_be_visible()
    expect(page.get_by_text("Generated, before")).to_be_visible()
    screenshots(page, "ablation-toy-gpt-date")
    assert page.console_errors == []


@pytest.mark.opens("ablation", model="smollm2", text="The capital of France is")
def test_every_head_of_smollm2_by_its_mean(page) -> None:
    page.get_by_text("its mean over the positions").click()
    wait_idle(page)
    page.get_by_text("Every head", exact=True).click()
    wait_idle(page)
    expect(figure(page, "Next token: the 10 likeliest")).to_be_visible()
    expect(page.get_by_text("270 heads, each replaced by its mean over the positions")).to_be_visible()
    screenshots(page, "ablation-smollm2")
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-gpt-date", text="14 feb 1999")
def test_compare_mask_on_and_off_on_the_attention_page(page) -> None:
    page.get_by_role("tab", name="Compare").click()
    wait_idle(page)
    for title in ("A · causal mask on", "B · causal mask off, reads A's output", "B − A"):
        expect(figure(page, title)).to_be_visible()
    difference = np.array(heatmap_values(page, "B − A"), dtype=float)
    assert np.nanmax(np.abs(difference)) > 0.01  # taking the mask off moves attention
    screenshots(page, "compare-mask")
    assert page.console_errors == []
