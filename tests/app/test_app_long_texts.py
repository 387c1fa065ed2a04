"""Texts longer than 2,048 tokens, without a browser, on a tiny random Llama that reads 4,096: the Overview and
Attention pages draw the whole text; a page whose own run keeps more than attention patterns says it reads at
most PAGE_RUN_MAX_TOKENS tokens and stops; Generate and Ablate heads keep their own limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.ui.page import PAGE_RUN_MAX_TOKENS
from tests.app.app_session import open_app_page
from tests.tiny_hf import build

LONG = "the cat sat on the mat " * 400  # 2,400 words, one token each, after <s>
GUARDED = [  # (page, the session key of its open view, the view): each asks for more than attention patterns
    ("app_pages/masks.py", "masks_view", "Scores → probabilities"),
    ("app_pages/masks.py", "masks_view", "Padding"),
    ("app_pages/masks.py", "masks_view", "Why −∞"),
    ("app_pages/positions.py", "positions_view", "Your tokens"),
    ("app_pages/step_through.py", None, None),
    *[("app_pages/activations.py", "activations_view", view)
      for view in ("Residual stream", "FFN neurons", "Norms", "Logit lens", "Trajectories")],
]
PATTERNS_ONLY = [("app_pages/masks.py", "masks_view", "Mask on / off")]  # reads attention patterns only


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """A tiny random Llama whose own limit (4,096 positions) lets it read more than 2,048 tokens; 6 layers of 4
    heads, so that a head scan of LONG is over the Ablate heads page's 40,000 token-heads."""
    return str(build("llama", Path(tmp_path_factory.mktemp("long")) / "llama", max_position_embeddings=4096,
                     num_hidden_layers=6))


def _open(at: AppTest, page: str, key: str | None, view: str | None) -> AppTest:
    at.switch_page(page).run()
    if key is not None:
        at.session_state[key] = view
        at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _stopped(at: AppTest) -> bool:
    return any(f"reads texts of up to {PAGE_RUN_MAX_TOKENS:,} tokens" in info.value for info in at.info)


def test_a_long_text_is_drawn_whole_and_pages_that_keep_more_than_patterns_say_why_they_stop(folder) -> None:
    at = open_app_page("app_pages/attention.py", folder=folder, text=LONG)
    trace = at.session_state["trace"]
    assert trace.facts.max_len == 4096 and len(trace.tokens) == 2401 > PAGE_RUN_MAX_TOKENS
    assert at.get("plotly_chart") and not at.error and not _stopped(at)  # the Attention page draws the whole text
    assert _open(at, "app_pages/overview.py", None, None).dataframe[0].value.shape[0] == 2401
    for page, key, view in PATTERNS_ONLY:  # first: AppTest opens a page's tab from the session state only on the
        assert _open(at, page, key, view).get("plotly_chart") and not _stopped(at), (page, view)  # first visit
    for page, key, view in GUARDED:
        _open(at, page, key, view)
        assert _stopped(at), (page, view)
        message = next(info.value for info in at.info if _stopped(at))
        assert "this one has 2,401" in message and "The Overview and Attention pages show the whole text" in message
        assert ("length squared" in message) == (view in ("Scores → probabilities", "Why −∞") or view is None)
        assert not at.get("plotly_chart") and not at.error, (page, view)


def test_generate_and_ablate_heads_keep_their_own_limits_on_a_long_text(folder) -> None:
    at = open_app_page("app_pages/generate.py", folder=folder, text=LONG)
    refused = "The text is 2,401 tokens long; this page generates from at most 1,024"
    assert refused in at.info[0].value  # said before a click, with Step off
    assert at.button(key="generate_step").disabled
    _open(at, "app_pages/ablation.py", None, None)
    at.toggle(key="ablation_every").set_value(True).run()  # every head ablated: one batch of two runs, no more
    assert at.get("plotly_chart") and not at.exception and not _stopped(at)
    assert any("would read 57,624 token-heads; the limit here is 40,000" in info.value for info in at.info)


def test_a_text_of_exactly_2048_tokens_is_read_by_every_page(folder) -> None:
    at = open_app_page("app_pages/activations.py", folder=folder, text="the cat sat on the mat " * 341 + "the")
    assert len(at.session_state["trace"].tokens) == PAGE_RUN_MAX_TOKENS
    for view in ("Residual stream", "Norms"):
        assert _open(at, "app_pages/activations.py", "activations_view", view).get("plotly_chart"), view
        assert not _stopped(at)


def test_a_long_texts_mask_is_drawn_in_its_corner_counted_whole_and_its_csv_holds_the_corner(folder) -> None:
    at = open_app_page("app_pages/masks.py", folder=folder, text=LONG)
    n = len(at.session_state["trace"].tokens)
    captions = [caption.value for caption in at.caption]
    assert (f"Drawn: the first 96 × 96 of {n:,} × {n:,} cells; the CSV holds those drawn (all would be about "
            f"{n * n * 10 / 1e9:.1f} GB of text).") in captions
    assert f"{n * (n - 1) // 2:,} of {n * n:,} cells hidden ({n * (n - 1) // 2:,} causal)." in captions
