"""What bench/browser_long.py opens: the models and texts of its cases, the heads it draws, and the views it clicks."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page

from app_browser.page import IDLE
from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.model.core.options import RunOptions
from bench.browser_attention import LOAD_TIMEOUT_MS, choose_model, nav, settle, text_of, tokenizer_folder

RANDOM = "random4"  # bench/long_32k.py's random 4-layer model of SmolLM2's shape, opened from its folder
CASES = tuple((name, int(tokens)) for name, tokens in (case.split(":") for case in os.environ.get(
    "BENCH_CASES", f"smollm2:8192,{RANDOM}:32768").split(",")))  # (model, tokens)
SITE = "decoder.attn"


@dataclass(frozen=True)
class View:
    name: str
    open: Callable[[Page], None]  # the click
    attention: bool  # on the Attention page (it has tabs)
    title: str  # part of the title of a figure that the view draws
    shot: str = ""  # where the view is one the person must see: the screenshot's name (long8k-<shot>.png)
    figure: str = ""  # the title of the figure its screenshot scrolls to, where not `title` (one it may not draw)


def tab(name: str) -> Callable[[Page], None]:
    return lambda page: page.get_by_role("tab", name=name).click()


def draw_as(name: str) -> Callable[[Page], None]:
    """Click one of the One head tab's "Draw the head as" buttons."""
    return lambda page: page.get_by_test_id("stMain").get_by_role("radio", name=name, exact=True).click()


def choose(label: str, value: int) -> Callable[[Page], None]:
    """Pick `value` in the Attention page's "Layer" or "Head" picker (a rerun: each its own view)."""
    def pick(page: Page) -> None:
        page.get_by_test_id("stMain").get_by_label(label, exact=True).first.click()
        page.keyboard.type(str(value))  # the list shows a few options at a time: typing keeps the ones that match
        page.get_by_role("option", name=str(value), exact=True).click()
    return pick


def views(line: tuple[int, int], sink: tuple[int, int]) -> tuple[View, ...]:
    """The views of a pass, in order: `line` the head whose lines the zoom and the distance view show (a
    previous-token head where the model has one), `sink` the head drawn with its sink apart."""
    return (
        View("Attention · Model view", lambda page: nav(page, "Attention"), True, "layers × heads"),
        View("role grid (same page)", lambda page: None, True, "every head by its role", "role-grid"),
        View(f"layer {line[0]} chosen", choose("Layer", line[0]), True, "layers × heads"),
        View(f"head {line[1]} chosen", choose("Head", line[1]), True, "layers × heads"),
        View("One head: zoom", tab("One head"), True, "max-pooled", "zoom"),
        View("by distance back", draw_as("by distance back"), True, "by distance back", "distance"),
        View("sinks apart", draw_as("sinks apart"), True, "max-pooled"),
        View(f"layer {sink[0]}, sinks apart", choose("Layer", sink[0]), True, "max-pooled"),
        View(f"head {sink[1]}, sinks apart", choose("Head", sink[1]), True, "max-pooled", "sink-apart",
             "the sink apart"),  # (a head without a sink says so in words)
        View("Rollout", tab("Rollout"), True, "rollout ·"),
        View("Head statistics", tab("Head statistics"), True, STATISTICS[0]),
        View("Overview", lambda page: nav(page, "Overview"), False, "· head"),
    )


def reset(page: Page) -> None:
    """Back to the matrix and the Model view tab (the page remembers both), so that the next pass starts there."""
    nav(page, "Attention")
    settle(page, attention=True, timeout_ms=120_000)
    tab("One head")(page)
    settle(page, attention=True, title="max-pooled", timeout_ms=120_000)
    draw_as("the matrix")(page)
    settle(page, attention=True, title="max-pooled", timeout_ms=120_000)
    tab("Model view")(page)
    settle(page, attention=True, title="layers × heads", timeout_ms=120_000)


def open_model(page: Page, model: str, folder: Path | None) -> None:
    """On the Overview, choose a named model, or type a folder into the custom model's box; wait until it has loaded
    and run the text the box holds."""
    nav(page, "Overview")
    settle(page, attention=False)
    if folder is None:
        choose_model(page, model)
    else:
        choose_model(page, "Custom · a Hugging Face folder or id…")
        box = page.get_by_test_id("stSidebar").get_by_label("Folder or hub id", exact=True)
        box.fill(str(folder))
        box.press("Enter")
        page.wait_for_timeout(300)
        page.wait_for_selector(IDLE, timeout=LOAD_TIMEOUT_MS)
    settle(page, attention=False)


def case_text(model: str, tokens: int, folder: Path | None) -> tuple[str, int, Path]:
    """The case's text, its tokens (the model's own tokenizer) and the model's folder."""
    from transformers import AutoTokenizer

    from bench.long_32k import number_text

    where = folder if folder is not None else tokenizer_folder(model)
    tokenizer = AutoTokenizer.from_pretrained(str(where))
    if folder is None:
        return (*text_of(tokenizer, tokens), where)
    text = number_text(tokenizer, tokens)  # a digit a token: 32,768 tokens fit the text box
    return text, len(tokenizer(text)["input_ids"]), where


def heads_to_draw(folder: Path, text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the strongest previous-token head, else the head most on the token before; the head most on the first
    token), from the model's roles on the text's first 1,024 tokens (loaded here, beside the app's)."""
    from attention_atlas.model.hf.loading import load_hf_runner

    runner = load_hf_runner(str(folder))
    ids = runner.text.encode(text)[:1024]
    short = runner.tokenizer.decode(ids, skip_special_tokens=True)
    table = runner.run(short, options=RunOptions(hooks=("*.hook_pattern",), summarised=True)).head_roles()
    table = table[table["site"] == SITE]
    line = table.loc[table["to previous token"].idxmax()]
    sink = table.loc[table["to first token"].idxmax()]
    return (int(line["layer"]), int(line["head"])), (int(sink["layer"]), int(sink["head"]))


def slug(text: str) -> str:
    return re.sub(r"\W+", "-", text.strip().lower()).strip("-")
