"""The Generate page without a browser: every control, on every model kind."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.registry import load_runner
from attention_atlas.ui.generation import MAX_CONTEXT_TOKENS
from tests.app.app_session import open_app_page

PAGE = "app_pages/generate.py"
DATE = "14 feb 1999"


def _page(model_id: str = "toy-date", text: str | None = DATE, folder: str | None = None) -> AppTest:
    return open_app_page(PAGE, model_id, text, folder)


def _click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _titles(at: AppTest) -> list[str]:
    return [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]


def _generated(at: AppTest) -> str:
    return at.code[0].value


def _heatmap_rows(at: AppTest, title_part: str) -> int:
    spec = next(json.loads(el.proto.spec) for el in at.get("plotly_chart")
                if title_part in json.loads(el.proto.spec)["layout"]["title"]["text"])
    return len(spec["data"][0]["y"])


def test_toy_date_step_run_force_and_reset() -> None:
    at = _page()
    assert "Press **Step**" in at.info[0].value and not at.get("plotly_chart")
    _click(at, "generate_step")
    assert _generated(at) == f"{DATE} ⟶ 1"
    assert at.selectbox(key="generate_pick").value == 0
    assert _titles(at)[0] == "Top 10 at step 1"
    assert _heatmap_rows(at, "self-attention over the context · mean") == 2  # toy-date: 2 decoder layers
    assert _heatmap_rows(at, "cross-attention over the source · layer 0") == 4  # its 4 heads
    _click(at, "generate_run")
    assert _generated(at) == f"{DATE} ⟶ 1999-02-14"
    table = at.dataframe[0].value
    assert "".join(table["token"][:-1]) == "1999-02-14" and table["token"].iloc[-1] == "</s>"
    probability = table["probability"].to_numpy()
    assert ((probability > 0) & (probability <= 1)).all() and set(table["chosen"]) == {"greedy"}
    assert "end token" in at.caption[-1].value
    assert at.button(key="generate_step").disabled and at.button(key="generate_run").disabled
    assert at.selectbox(key="generate_pick").value == 10  # the newest token: the end token
    at.selectbox(key="generate_layer").set_value(1).run()
    assert "Step 11 · self-attention over the context · layer 1, every head" in _titles(at)
    at.selectbox(key="generate_pick").set_value(0).run()
    at.selectbox(key="generate_force_pick").set_value(1).run()
    forced = at.selectbox(key="generate_force_pick").options[1]
    _click(at, "generate_force")
    text = _generated(at)
    assert text != f"{DATE} ⟶ 1999-02-14" and text.split("⟶ ")[1][0] == forced.split(". ")[1][0]
    assert "forced" in at.selectbox(key="generate_pick").options[0]
    _click(at, "generate_reset")
    assert "Press **Step**" in at.info[0].value and not at.code


def test_sampling_with_a_seed_is_repeatable_and_settings_reset_the_generation() -> None:
    at = _page("toy-gpt-date")
    at.radio(key="generate_method").set_value("sample").run()
    at.number_input(key="generate_temperature").set_value(3.0).run()
    at.number_input(key="generate_top_k").set_value(5).run()
    at.number_input(key="generate_top_p").set_value(0.9).run()
    at.number_input(key="generate_seed").set_value(3).run()
    at.number_input(key="generate_max_new").set_value(6).run()
    first = _generated(_click(at, "generate_run"))
    assert all("sampled" in option for option in at.selectbox(key="generate_pick").options)
    assert len(at.selectbox(key="generate_pick").options) <= 6
    _click(at, "generate_reset")
    assert _generated(_click(at, "generate_run")) == first
    at.number_input(key="generate_seed").set_value(4).run()  # other settings: the generation starts again
    assert not at.code


def test_toy_gpt_date_greedy_opens_as_the_given_target() -> None:
    at = _page("toy-gpt-date")
    assert "KV cache" not in at.caption[0].value  # the toy models re-read their context
    assert _generated(_click(at, "generate_run")) == f"{DATE} ⟶ 1999-02-14"
    assert _heatmap_rows(at, "mean over heads") == 4
    _click(at, "generate_open")
    assert at.sidebar.radio(key="decoder_mode").value == "given target"
    assert at.sidebar.text_input(key="target").value == "1999-02-14"
    assert at.sidebar.text_input(key="text").value == DATE


@pytest.mark.parametrize(("key", "value", "words"), [
    ("generate_max_new", 0, "Max new tokens must be between 1 and 64"),
    ("generate_max_new", 65, "Max new tokens must be between 1 and 64"),
    ("generate_top_k", -1, "Top-k must be at least 1"),
    ("generate_top_p", 0.0, "Top-p must be above 0"),
    ("generate_top_p", 1.5, "Top-p must be above 0"),
])
def test_bad_settings_are_explained_and_generate_nothing(key: str, value: float, words: str) -> None:
    at = _page()
    at.radio(key="generate_method").set_value("sample").run()
    at.number_input(key=key).set_value(value).run()
    assert any(words in e.value for e in at.error) and not at.exception
    assert at.button(key="generate_step").disabled and at.button(key="generate_run").disabled


def test_temperature_zero_is_greedy_and_says_so() -> None:
    at = _page()
    at.radio(key="generate_method").set_value("sample").run()
    at.number_input(key="generate_temperature").set_value(0.0).run()
    assert any("means greedy" in i.value for i in at.info)
    assert _generated(_click(at, "generate_run")) == f"{DATE} ⟶ 1999-02-14"


def test_an_encoder_decoder_generation_opens_as_the_given_target() -> None:
    at = _page()
    at.sidebar.selectbox(key="causal").set_value("off everywhere").run()
    assert "no causal mask anywhere" in at.caption[0].value
    generated = _generated(_click(at, "generate_run")).split("⟶ ")[1]
    _click(at, "generate_open")
    assert at.sidebar.radio(key="decoder_mode").value == "given target"
    assert at.sidebar.text_input(key="target").value == generated
    assert "Every page now opens" in at.success[0].value
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception


def test_smollm2_steps_show_every_layer_and_open_as_the_text() -> None:
    prompt = "The capital of France is"
    at = _page("smollm2", prompt)
    assert "KV cache" in at.caption[0].value
    for _ in range(2):
        _click(at, "generate_step")
    assert _generated(at) == prompt + " Paris."
    assert _heatmap_rows(at, "mean over heads") == 30 and _heatmap_rows(at, "every head") == 9
    _click(at, "generate_open")
    assert at.sidebar.text_input(key="text").value == prompt + " Paris."
    assert not at.code  # a new text: a new generation


def test_an_encoder_says_it_does_not_generate() -> None:
    at = _page("minilm", None)
    assert "does not generate" in at.info[0].value
    assert not at.button and not at.get("plotly_chart")


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart"])
def test_tiny_hugging_face_folders(folders, family: str) -> None:
    at = _page(folder=str(folders[family]), text="the cat sat")
    at.number_input(key="generate_max_new").set_value(4).run()
    _click(at, "generate_step")
    if at.button(key="generate_run").disabled:  # a random model may write its end token at once
        assert "end token" in at.caption[-1].value
    else:
        _click(at, "generate_run")
    assert 1 <= len(at.selectbox(key="generate_pick").options) <= 4
    assert _heatmap_rows(at, "self-attention over the context · mean") == 2
    assert any("cross-attention" in t for t in _titles(at)) == (family in ("t5", "bart"))


def test_a_prompt_too_long_to_generate_from_is_refused_before_a_click() -> None:
    """A text over the page's MAX_CONTEXT_TOKENS is said at once, with Step and Run off (not after a click)."""
    text = "One more sentence about the weather today. " * 150  # about 1,200 SmolLM2 tokens
    at = _page("smollm2", text)
    assert not at.exception
    assert [info.value for info in at.info] == [
        f"The text is {len(load_runner('smollm2').text.encode(text)):,} tokens long; this page generates from at most "
        f"{MAX_CONTEXT_TOKENS:,}. Shorten it."]
    assert at.button(key="generate_step").disabled and at.button(key="generate_run").disabled
    assert not at.get("plotly_chart")
    short = _page("smollm2", "The capital of France is")
    assert not short.button(key="generate_step").disabled and "Press **Step**" in short.info[0].value
