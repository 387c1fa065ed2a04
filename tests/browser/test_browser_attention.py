"""The Attention page in a real browser: every view draws, a thumbnail opens its head, the causal
mask switch zeroes the upper triangle, and a figure downloads as a PNG."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import expect

from app_browser.page import choose, figure, heatmap_values, live, wait_idle
from app_browser.server import ARTIFACTS
from attention_atlas.viz.masked import MASKED_LABEL

ONE_HEAD = "encoder self-attention · layer"


@pytest.mark.opens("attention", model="toy-copy")
def test_attention_page_views(page) -> None:
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible()
    expect(figure(page, "layers × heads")).to_be_visible()  # it opens on the model view
    page.get_by_role("tab", name="One head").click()
    choose(page, "Layer", "0")
    choose(page, "Head", "0")
    expect(figure(page, ONE_HEAD).first.locator(".gtitle")).to_have_text("encoder self-attention · layer 0 · head 0")
    choose(page, "Head", "3")
    expect(figure(page, ONE_HEAD).first.locator(".gtitle")).to_have_text("encoder self-attention · layer 0 · head 3")
    page.screenshot(path=str(ARTIFACTS / "attention.png"), full_page=True)
    for tab, title in [("All heads of this layer", "all 4 heads"), ("Token lines", "token lines"),
                       ("Model view", "layers × heads"), ("Rollout", "rollout")]:
        page.get_by_role("tab", name=tab).click()
        expect(figure(page, title)).to_be_visible()
        figure(page, title).screenshot(path=str(ARTIFACTS / f"{tab.lower().replace(' ', '-')}.png"))
    page.get_by_role("tab", name="Head statistics").click()
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-reverse")
def test_clicking_a_thumbnail_opens_that_head(page) -> None:
    grid = figure(page, "layers × heads")
    expect(grid).to_be_visible()
    grid.locator(".scatterlayer .point").nth(6).click(force=True)  # layer 1, head 2; plotly's drag layer takes it
    expect(page.get_by_test_id("stMain").get_by_label("Layer", exact=True)).to_have_value("1")
    expect(figure(page, ONE_HEAD).first.locator(".gtitle")).to_have_text("encoder self-attention · layer 1 · head 2")
    page.get_by_role("tab", name="All heads of this layer").click()
    figure(page, "all 4 heads").locator(".scatterlayer .point").nth(1).click(force=True)
    expect(figure(page, ONE_HEAD).first.locator(".gtitle")).to_have_text("encoder self-attention · layer 1 · head 1")
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-copy", text="abcdef")
def test_the_causal_mask_switch_masks_the_upper_triangle_and_draws_it_apart(page) -> None:
    page.get_by_role("tab", name="One head").click()
    before = np.array(heatmap_values(page, ONE_HEAD), dtype=float)  # (q, k): an encoder sees both ways
    assert np.triu(before, 1).sum() > 0.1
    expect(page.get_by_text(MASKED_LABEL)).to_have_count(0)
    choose(page, "Causal mask", "on everywhere", in_sidebar=True)
    expect(figure(page, "· head").first.locator(".gtitle")).to_contain_text("encoder self-attention (masked) · layer")
    after = np.array(heatmap_values(page, "· head"), dtype=float)  # JSON null -> NaN: drawn as no colour
    assert np.isnan(after[np.triu_indices(7, 1)]).all()  # masked: no value of the colour scale
    assert not np.isnan(after[np.tril_indices(7)]).any()
    assert np.allclose(after[np.tril_indices(7)].reshape(-1).sum(), 7.0, atol=1e-3)  # every row sums to 1
    head = figure(page, "· head").first
    expect(head.get_by_text(MASKED_LABEL)).to_be_visible()  # the legend names it
    expect(head.locator(".imagelayer image")).to_have_count(1)  # the hatching under it
    head.screenshot(path=str(ARTIFACTS / "causal-on.png"))
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-copy")
def test_a_figure_downloads_as_png(page) -> None:
    page.get_by_role("tab", name="One head").click()
    choose(page, "Layer", "0")
    choose(page, "Head", "0")
    expect(figure(page, ONE_HEAD).first.locator(".gtitle")).to_contain_text("layer 0 · head 0")  # redrawn: the
    # buttons beside it are this head's
    with page.expect_download(timeout=60_000) as download:  # the first PNG starts kaleido's Chromium
        live(page.get_by_test_id("stMain")).get_by_role("button", name="PNG", exact=True).first.click()
    path = ARTIFACTS / "download.png"
    download.value.save_as(path)
    assert download.value.suggested_filename == "toy-copy.encoder.attn.0.0.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-induction", text="qwertyuiop", view="One head", layer="1", head="2")
def test_clicking_a_cell_explains_why_the_head_attends_there(page) -> None:
    """A click on a cell of the head opens "Why here?" on it: from the second 'r' (#14) to the 't' (#5) after the first
    one, the induction head's key side led by L0H3, which looks at the previous token (K-composition)."""
    head = figure(page, "· head 2")
    expect(head).to_be_visible()
    head.locator(".scatterlayer .point").nth(14 * 21 + 5).click(force=True)  # 21 tokens a row
    expect(page.get_by_text("L1H2 attends from ‘r’ (#14) to ‘t’ (#5) mostly because of what L0H3")).to_be_visible(
        timeout=60_000)
    expect(page.get_by_test_id("stMain").get_by_label("Query position (0–20)")).to_have_value("14")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.get_by_text("mostly because of what L0H3").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "why-here.png"))
    assert page.console_errors == []


@pytest.mark.opens("attention", model="toy-induction", text="qwertyuiop", view="One head", layer="1", head="2",
                   why_open="1", why_query="14", why_key="5")
def test_a_heads_bar_in_why_here_opens_that_head(page) -> None:
    bars = figure(page, "L1H2 · from #14").first  # (the pairs matrix below shares its title's start)
    expect(bars).to_be_visible(timeout=60_000)
    key_side = bars.locator(".barlayer .trace").nth(1)  # the key side's bars, the largest (L0H3) first
    key_side.locator(".point").first.click(force=True)
    expect(page.get_by_test_id("stMain").get_by_label("Layer", exact=True)).to_have_value("0")
    expect(figure(page, "· head 3").first).to_be_visible()
    assert page.console_errors == []


LONG = " ".join(f"word{i % 97} said{i % 13}" for i in range(150))  # about 750 SmolLM2 tokens: more than a window


@pytest.mark.opens("attention", model="smollm2", text=LONG, view="One head", site="decoder.attn", layer="16",
                   head="0")
def test_a_click_on_the_pooled_head_opens_that_region(page) -> None:
    """A long text's head max-pooled above its 512-token window: a click in the middle of the left edge moves the
    window's rows to the middle of the text and its keys to the start, untied from the rows."""
    pooled = figure(page, "max-pooled")
    expect(pooled).to_be_visible(timeout=120_000)
    pooled.locator(".scatterlayer .point").nth(12 * 24 + 0).click(force=True)  # row block 12 of 24, column 0
    wait_idle(page)  # the rerun the click asked for; the elements of the run before it linger, marked stale
    main = live(page.get_by_test_id("stMain"))
    expect(main.get_by_role("switch", name="Keys follow the rows (the diagonal block)")).not_to_be_checked()
    expect(main.get_by_text("key columns #0–#511")).to_be_visible()
    assert page.console_errors == []
