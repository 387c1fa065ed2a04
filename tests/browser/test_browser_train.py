"""The Train page in a real browser: start a training, see the bar and the curves move while it runs, scrub the
timeline of snapshots, stop it, download the model, upload it back (and a file that is not one), and open it."""

from __future__ import annotations

import re
import zipfile

from playwright.sync_api import expect

from app_browser.page import figure, live, open_page, screenshots, wait_idle
from tests.waiting import until

PROGRESS = re.compile(r"(training|paused|stopped|finished) · step ([\d,]+) of")


def _step(page) -> int:
    """The step the progress bar says (the newest, where a rerun still shows the bar it replaces)."""
    texts = page.get_by_test_id("stProgress").all_inner_texts()
    return max(int(match.group(2).replace(",", "")) for text in texts if (match := PROGRESS.search(text)))


def _same_row(*elements) -> bool:
    """Whether the elements' boxes share a horizontal band (each overlaps the first vertically)."""
    first, *others = (element.bounding_box() for element in elements)
    return all(box["y"] < first["y"] + first["height"] and first["y"] < box["y"] + box["height"] for box in others)


def _check_the_controls_sit_together(page) -> None:
    """At a projector's 1280 x 720: Pause, Stop and the timeline's switch on one row, side by side; the score picker
    beside the timeline, not alone above an empty half; the grid of heads with no title over its "head" axis."""
    page.set_viewport_size({"width": 1280, "height": 720})
    wait_idle(page)
    pause, stop = page.get_by_role("button", name="Pause"), page.get_by_role("button", name="Stop")
    play = page.get_by_test_id("stCheckbox").filter(has_text="Play the timeline")
    assert _same_row(pause, stop, play)
    assert stop.bounding_box()["x"] - (pause.bounding_box()["x"] + pause.bounding_box()["width"]) < 40
    timeline = live(page).get_by_test_id("stSlider").filter(has_text="Snapshot at step")
    score = page.get_by_test_id("stSelectbox").filter(has_text="Score")
    assert _same_row(timeline, score)
    assert score.bounding_box()["x"] > timeline.bounding_box()["x"] + timeline.bounding_box()["width"] - 1
    grid = page.locator(".js-plotly-plot").first  # the grid of every head
    assert not "".join(grid.locator(".gtitle").all_text_contents()).strip()
    page.set_viewport_size({"width": 1400, "height": 1000})


def test_train_watch_scrub_stop_download_upload_and_open(page, tmp_path) -> None:
    open_page(page, "Train")
    expect(page.get_by_role("heading", name="Train", exact=True)).to_be_visible()
    steps = page.get_by_label("Steps", exact=True)
    steps.fill("20000")
    steps.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Start training").click()
    expect(page.get_by_test_id("stProgress").filter(has_text="training · step").first).to_be_visible(timeout=60_000)
    # the slider is keyed by its snapshots: while a rerun draws the new one, the old one lingers, marked stale
    expect(live(page).get_by_text("Snapshot at step")).to_be_visible(timeout=60_000)
    first = _step(page)
    until(lambda: _step(page) > first, 60, "move of the progress bar")  # the bar moves
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible()  # the curves
    expect(page.get_by_text("induction score of every head")).to_be_visible()
    _check_the_controls_sit_together(page)
    screenshots(page, "train-running")
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_test_id("stProgress").filter(has_text="stopped").first).to_be_visible(timeout=60_000)
    expect(page.get_by_role("button", name="Open the trained model")).to_be_visible(timeout=60_000)
    wait_idle(page)
    heatmap_title = page.locator(".gtitle").filter(has_text="layer")
    expect(heatmap_title.first).not_to_contain_text("at step 0 ")  # the newest snapshot, once the page has drawn it
    last_title = heatmap_title.first.text_content()
    slider = page.get_by_role("slider")
    slider.first.focus()
    slider.first.press("Home")  # the first snapshot: before any training
    wait_idle(page)
    expect(heatmap_title.first).to_contain_text("at step 0 ")
    assert heatmap_title.first.text_content() != last_title
    screenshots(page, "train-stopped")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download it (.zip)").first.click()
    archive = tmp_path / "model.zip"
    download.value.save_as(archive)
    assert zipfile.ZipFile(archive).namelist() == ["induction/model.safetensors", "induction/config.json"]
    page.get_by_text("Open a model file downloaded from this page").click()
    not_a_model = tmp_path / "not-a-model.zip"
    not_a_model.write_text("<script>alert(1)</script>")
    page.locator("input[type='file']").set_input_files(not_a_model)
    expect(page.get_by_text("That file cannot be opened: the file is not a zip archive")).to_be_visible()
    page.locator("input[type='file']").set_input_files(archive)
    opening = page.get_by_role("button", name=re.compile(r"^Open trained-induction-upload-\w+ in the app$"))
    expect(opening).to_be_visible()
    opening.click()
    model = page.get_by_test_id("stSidebar").get_by_label("Model", exact=True)
    expect(model).to_have_value(re.compile(r"^This session · trained-induction-upload-\w+$"), timeout=60_000)
    page.get_by_role("button", name="Open the trained model").click()
    expect(model).to_have_value(re.compile(r"^This session · trained-induction-\w+$"), timeout=60_000)
    open_page(page, "Overview")
    expect(page.get_by_role("heading", name=re.compile("trained-induction-"))).to_be_visible()  # the model opened
    open_page(page, "Attention")
    expect(figure(page, "layer")).not_to_have_count(0)
    assert page.console_errors == []
