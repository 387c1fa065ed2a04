"""A Hugging Face model spread from the sidebar in a real browser: a custom folder typed keeps the text, Device →
spread and a CPU budget put most of a tiny Llama on the disk; the model card says so in full, the heatmap draws, Step
through reads an offloaded head's weights, and nothing logs an error; the same with BLOOM, whose attention is routed
through the app's."""

from __future__ import annotations

import math
from pathlib import Path

from playwright.sync_api import expect

from app_browser.page import choose, figure, heatmap_values, live, open_page, screenshots, wait_idle
from tests.tiny_hf import build, build_type


def _spread(page, folder: Path, budget: str) -> None:
    """Open the custom `folder` from the sidebar, then spread it with a CPU `budget` ("cpu=80000")."""
    sidebar = page.get_by_test_id("stSidebar")
    choose(page, "Model", "Custom · a Hugging Face folder or id…", in_sidebar=True)
    box = sidebar.get_by_label("Folder or hub id", exact=True)
    box.fill(str(folder))
    box.press("Enter")
    wait_idle(page)
    # the text box and the device picker come back with the session's values (they were not drawn while no folder
    # was typed: the browser showed the text box empty, and the next click sent that)
    expect(sidebar.get_by_label("Text", exact=True)).to_have_value("The cat sat on the mat because it was tired.")
    choose(page, "Device", "spread", in_sidebar=True)
    budgets = sidebar.get_by_label("Memory per device", exact=True)
    budgets.fill(budget)
    budgets.press("Enter")
    wait_idle(page)


def test_spread_a_custom_model_over_the_cpu_and_the_disk(page, tmp_path) -> None:
    _spread(page, build("llama", tmp_path / "llama", num_hidden_layers=4), "cpu=80000")
    card = page.get_by_test_id("stTable")
    expect(card).to_contain_text("cpu: model.embed_tokens, model.layers.0 · disk: model.layers.1–3")
    expect(card).to_contain_text("cpu + disk")
    expect(page.locator(".js-plotly-plot .heatmaplayer").first).to_be_visible()
    card.scroll_into_view_if_needed()
    screenshots(page, "spread-model-card")
    open_page(page, "Step through")
    wait_idle(page)  # the page's run, whose picker the click opens (not one a rerun left stale)
    live(page.get_by_test_id("stMain")).get_by_label("Layer", exact=True).first.click()
    page.get_by_role("option", name="3", exact=True).click()  # a layer on the disk
    wait_idle(page)
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    expect(page.get_by_test_id("stException")).to_have_count(0)
    assert page.console_errors == [] and page.dialogs == []


def test_bloom_spread_over_the_disk_draws_its_alibi_and_steps_through_an_offloaded_head(page, tmp_path) -> None:
    """BLOOM computes attention in its own code (routed through the app's attention when it loads), and a spread
    model's modules are wrapped by accelerate: spread over the CPU and the disk, its Masks page draws a head's ALiBi
    bias apart from its scores, and Step through reads a head on the disk and recomputes it with that bias."""
    _spread(page, build_type("bloom", tmp_path / "bloom"), "cpu=60000")
    expect(page.get_by_test_id("stTable")).to_contain_text("disk: transformer.ln_f, transformer.h")  # every block
    open_page(page, "Masks")
    page.get_by_role("tab", name="Scores → probabilities").click()
    wait_idle(page)
    expect(figure(page, "B (ALiBi)")).to_be_visible()
    bias = heatmap_values(page, "B (ALiBi)")  # head 0, the keys the causal mask hides hatched (NaN)
    assert bias[2][0] < bias[2][1] < bias[2][2] == 0 and math.isnan(bias[0][1])  # keys further back lose more
    open_page(page, "Step through")
    expect(page.get_by_test_id("stAlert").filter(has_text="Recomputed here")).to_contain_text("the head's output to")
    expect(page.get_by_test_id("stException")).to_have_count(0)
    assert page.console_errors == [] and page.dialogs == []
