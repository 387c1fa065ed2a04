"""The Masks page in a real browser: its figures draw, a head change redraws them, and a masked cell looks unlike
a weight of 0 on screen."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import expect

from app_browser.page import choose, figure, heatmap_values
from app_browser.server import ARTIFACTS
from attention_atlas.viz.masked import MASKED_LABEL

PROBABILITIES = "softmax(scores + M)"

CELL_CENTRES = """gd => {
  const x = gd._fullLayout.xaxis, y = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
  return [box.left + x._offset, box.top + y._offset, x._length / gd._fullData[0].x.length,
          y._length / gd._fullData[0].y.length];
}"""


def _pixel(shot: Image.Image, geometry: list[float], row: int, col: int) -> np.ndarray:
    """The RGB of the screen pixel a quarter into cell (row, col) (rows top to bottom), off any hatch centre line."""
    left, top, width, height = geometry
    return np.array(shot.getpixel((int(left + (col + 0.5) * width), int(top + (row + 0.5) * height))))[:3]


@pytest.mark.opens("masks", model="toy-gpt-date", text="may 1 2000")
def test_scores_and_probabilities_with_the_mask_drawn_apart(page) -> None:
    expect(page.get_by_role("heading", name="Masks", exact=True)).to_be_visible()
    page.get_by_role("tab", name="Scores → probabilities").click()
    expect(figure(page, PROBABILITIES)).to_be_visible()
    choose(page, "Layer", "0")
    choose(page, "Head", "0")
    before = np.array(heatmap_values(page, PROBABILITIES), dtype=float)  # JSON null -> NaN where masked
    choose(page, "Head", "2")
    expect(figure(page, PROBABILITIES)).to_be_visible()
    after = np.array(heatmap_values(page, PROBABILITIES), dtype=float)
    assert not np.allclose(np.nan_to_num(before), np.nan_to_num(after))  # the figure changed with the head
    hidden = np.isnan(after)
    assert hidden[np.triu_indices(len(after), 1)].all() and not hidden[np.tril_indices(len(after))].any()
    probabilities = figure(page, PROBABILITIES).first
    expect(probabilities.get_by_text(MASKED_LABEL)).to_be_visible()
    probabilities.scroll_into_view_if_needed()
    geometry = probabilities.evaluate(CELL_CENTRES)
    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    low = np.unravel_index(np.nanargmin(np.where(hidden, np.nan, after)), after.shape)  # the smallest weight drawn
    assert after[low] < 0.02
    zero_like, masked = _pixel(shot, geometry, *low), _pixel(shot, geometry, 0, len(after) - 1)
    assert np.abs(zero_like.astype(int) - masked.astype(int)).sum() > 150  # grey hatch vs the scale's dark end
    assert masked.max() - masked.min() < 20  # grey: no colour of the scale
    probabilities.screenshot(path=str(ARTIFACTS / "masks-probabilities.png"))
    page.screenshot(path=str(ARTIFACTS / "masks-scores.png"), full_page=True)
    assert page.console_errors == []


@pytest.mark.opens("masks", model="toy-date", text="may 1 2000")
def test_every_tab_draws_and_fits_a_projector(page) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    for tab, title in [("Masks of this run", "mask · encoder"), ("Mask on / off", "difference"),
                       ("Padding", "padded · layer"), ("Scores → probabilities", "scores + M")]:
        page.get_by_role("tab", name=tab).click()
        expect(figure(page, title).first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / f"masks-{tab.split()[0].lower()}-1280.png"))
    page.get_by_role("tab", name="Why −∞").click()
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "masks-why-1280.png"), full_page=True)
    assert page.console_errors == []
