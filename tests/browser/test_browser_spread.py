"""A Hugging Face model spread from the sidebar in a real browser: a custom folder typed keeps the text, Device →
spread and a CPU budget put most of a tiny Llama on the disk; the model card says so in full, the heatmap draws, Step
through reads an offloaded head's weights, and nothing logs an error."""

from __future__ import annotations

from playwright.sync_api import expect

from app_browser.page import choose, open_page, screenshots, wait_idle
from tests.tiny_hf import build


def test_spread_a_custom_model_over_the_cpu_and_the_disk(page, tmp_path) -> None:
    folder = build("llama", tmp_path / "llama", num_hidden_layers=4)
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
    budgets.fill("cpu=80000")
    budgets.press("Enter")
    wait_idle(page)
    card = page.get_by_test_id("stTable")
    expect(card).to_contain_text("cpu: model.embed_tokens, model.layers.0 · disk: model.layers.1–3")
    expect(card).to_contain_text("cpu + disk")
    expect(page.locator(".js-plotly-plot .heatmaplayer").first).to_be_visible()
    card.scroll_into_view_if_needed()
    screenshots(page, "spread-model-card")
    open_page(page, "Step through")
    page.get_by_test_id("stMain").get_by_label("Layer", exact=True).first.click()
    page.get_by_role("option", name="3", exact=True).click()  # a layer on the disk
    wait_idle(page)
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    expect(page.get_by_test_id("stException")).to_have_count(0)
    assert page.console_errors == [] and page.dialogs == []
