"""The Attribution page in a real browser: a toy GPT's heads, MiniLM saying why not, and SmolLM2 on the names
sentence, " Mary" over " John": each head's share drawn, the contribution graph drawn, a click on the head that adds
most, then on an edge of the graph, each opening its head on the Attention page, and a patching stopped mid-way
keeping what it patched; nothing logs an error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import expect

from app_browser.page import choose, figure, heatmap_values, model_label, open_page, screenshots, wait_idle
from app_browser.server import ARTIFACTS

NAMES = "When Mary and John went to the store, John gave a drink to"
HEADS = "Each attention head's direct share"


MARY_OVER_JOHN = pytest.mark.opens("attribution", model="smollm2", text=NAMES)


def _mary_over_john(page):
    """The Attribution page on SmolLM2 and the names sentence (the test's `opens` link: `MARY_OVER_JOHN`), " Mary"
    over " John"; its main part."""
    main = page.get_by_test_id("stMain")
    for label, word in (("Answer (one token)", " Mary"), ("Wrong answer (one token)", " John")):
        main.get_by_label(label, exact=True).fill(word)
        main.get_by_label(label, exact=True).press("Enter")
        wait_idle(page)
    return main


@MARY_OVER_JOHN
def test_smollm2_says_which_heads_write_mary_over_john_and_opens_one(page) -> None:
    main = _mary_over_john(page)
    expect(figure(page, "logit(' Mary') − logit(' John')").first).to_be_visible()
    shares = np.array(heatmap_values(page, HEADS), dtype=float)  # (layers, heads)
    assert shares.shape == (30, 9)
    screenshots(page, "attribution-smollm2")
    graph = figure(page, "The routes to the prediction").first
    graph.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "attribution-graph-1280.png"))
    assert graph.evaluate("gd => gd._fullData[0].hovertext.length") > 0  # attention edges to click
    layer, head = np.unravel_index(shares.argmax(), shares.shape)
    figure(page, HEADS).locator(".scatterlayer .point").nth(int(layer * 9 + head)).click(force=True)
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible()
    expect(main.get_by_label("Layer", exact=True)).to_have_value(str(layer))
    expect(main.get_by_label("Head", exact=True)).to_have_value(str(head))
    expect(page.get_by_test_id("stSidebar").get_by_label("Model", exact=True)).to_have_value(model_label("smollm2"))
    open_page(page, "Attribution")  # and an edge of the graph opens the head that brings most of it
    graph = figure(page, "The routes to the prediction").first
    graph.scroll_into_view_if_needed()
    described = graph.evaluate("gd => gd._fullData[0].hovertext[0]")  # "layer 23: … <br>head 0 brings …"
    layer, head = int(described.split(":")[0].split()[-1]), int(described.split("<br>head ")[1].split()[0])
    graph.locator(".scatterlayer .trace").first.locator(".point").first.click(force=True)
    wait_idle(page)
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible()
    expect(main.get_by_label("Layer", exact=True)).to_have_value(str(layer))
    expect(main.get_by_label("Head", exact=True)).to_have_value(str(head))
    assert page.console_errors == []


@MARY_OVER_JOHN
def test_a_patching_stopped_midway_keeps_what_it_patched(page) -> None:
    """SmolLM2, the offered swap of the names: the estimate drawn first, then the patched runs under a progress bar;
    Stop ends them and the grids keep the cells patched, the rest empty, and say so."""
    main = _mary_over_john(page)
    main.get_by_role("button", name="Mary and John swapped").click()
    wait_idle(page)
    expect(main.get_by_label("Corrupted text (as many tokens as the text)")).to_have_value(
        NAMES.replace("Mary", "@").replace("John", "Mary").replace("@", "John"))
    main.get_by_role("button", name="Patch", exact=True).click()
    expect(main.get_by_text(re.compile(r"^Patching: [1-9][\d,]* of")).first).to_be_visible(timeout=60_000)
    expect(figure(page, "Attribution patching's estimate for each head").first).to_be_visible()  # drawn first
    main.get_by_role("button", name="Stop", exact=True).click()
    wait_idle(page)
    expect(main.get_by_text("Stopped: the empty cells were not patched.", exact=False).first).to_be_visible()
    figure(page, "Patching the residual stream").first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "patching-stopped-1280.png"))
    cells = np.array(heatmap_values(page, "Patching the residual stream"), dtype=float)  # (layers, positions)
    assert cells.shape[0] == 30 and 0 < np.isfinite(cells).sum() < cells.size  # some patched, not all
    assert page.console_errors == []


@pytest.mark.opens("attribution", model="toy-gpt-date", text="march 3 2021")
def test_a_toy_gpt_is_attributed_and_an_encoder_says_why_not(page) -> None:
    """toy-gpt-date's first output digit ("2" over "1") drawn head by head; MiniLM, an encoder, says why there is no
    logit to attribute."""
    main = page.get_by_test_id("stMain")
    main.get_by_label("Position: the prediction made after", exact=True).click()
    page.get_by_role("option", name="13: =").click()  # the prompt's last token: the answer's first digit comes next
    wait_idle(page)
    for label, word in (("Answer (one token)", "2"), ("Wrong answer (one token)", "1")):
        main.get_by_label(label, exact=True).fill(word)
        main.get_by_label(label, exact=True).press("Enter")
        wait_idle(page)
    shares = np.array(heatmap_values(page, "Each attention head's direct share of the logit('2') − logit('1')"),
                      dtype=float)
    assert shares.shape == (4, 4) and np.isfinite(shares).all()
    choose(page, "Model", model_label("minilm"), in_sidebar=True)  # staying on this page
    expect(main.get_by_text("is an encoder: it reads the whole text at once", exact=False)).to_be_visible()
    assert page.console_errors == []
