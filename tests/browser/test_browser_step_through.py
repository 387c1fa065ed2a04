"""The Step-through page in a real browser: it draws every step, changing the head changes the numbers, the
masked scores are hatched, and nothing logs an error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import expect

from app_browser.page import choose, figure, heatmap_values, wait_idle
from app_browser.server import ARTIFACTS
from attention_atlas.viz.masked import MASKED_LABEL


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


@pytest.mark.opens("step_through", model="toy-date")
def test_step_through_page_changes_with_the_head(page) -> None:
    expect(page.get_by_role("heading", name="Step through one head")).to_be_visible()
    choose(page, "Layer", "0")
    choose(page, "Head", "0")
    expect(page.get_by_text("Recomputed here from the weights and X")).to_be_visible()
    expect(figure(page, "W_Q, the slice of head 0")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "step-through.png"), full_page=True)
    before = np.array(heatmap_values(page, "W_Q, the slice of head"), dtype=float)
    choose(page, "Head", "2")
    expect(figure(page, "W_Q, the slice of head 2")).to_be_visible()
    after = np.array(heatmap_values(page, "W_Q, the slice of head"), dtype=float)
    assert before.shape == after.shape == (48, 16) and not np.allclose(before, after)
    _tab(page, "3 · Scores → pattern")
    pattern = np.array(heatmap_values(page, "A, the attention pattern"), dtype=float)
    assert np.allclose(pattern.sum(axis=1), 1, atol=1e-4)
    figure(page, "A, the attention pattern").screenshot(path=str(ARTIFACTS / "step-through-pattern.png"))
    page.get_by_test_id("stMain").get_by_text("decoder self-attention (masked)", exact=True).click()
    wait_idle(page)
    expect(page.get_by_role("tab", name="3 · Scores → pattern")).to_have_attribute("aria-selected", "true")
    expect(page).to_have_url(re.compile(r"[?&]step_view=3"))  # the open tab is in the link (kept when the site
    # changes); polled: on a loaded machine the rerun that writes it may start after `wait_idle` has returned
    masked = figure(page, "S + M")
    expect(masked.get_by_text(MASKED_LABEL)).to_be_visible()
    scores = np.array(heatmap_values(page, "S + M"), dtype=float)
    assert np.isnan(scores[np.triu_indices(len(scores), 1)]).all() and not np.isnan(np.diag(scores)).any()
    masked.screenshot(path=str(ARTIFACTS / "step-through-masked.png"))
    page.set_viewport_size({"width": 1280, "height": 720})
    _tab(page, "4 · × V, W_O, residual, norm")
    expect(figure(page, "Concat of every head")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "step-through-1280.png"))
    assert page.console_errors == []
