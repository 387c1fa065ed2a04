"""The app as a person uses it, without a browser (streamlit.testing.v1.AppTest)."""

import json
import re

from streamlit.testing.v1 import AppTest

from tests.tiny_hf import build

APP = "../app.py"
CUSTOM = "custom"  # the model picker's last choice: a folder or hub id typed in


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    return at


def _error(at: AppTest) -> str:
    """The first error as a person reads it (the app backslash-escapes Markdown in messages)."""
    return re.sub(r"\\(.)", r"\1", at.error[0].value)


def _titles(at: AppTest) -> list[str]:
    return [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]


def _heatmap_title(at: AppTest) -> str:
    """The attention heatmap is the page's last figure."""
    return _titles(at)[-1]


def test_opens_on_a_model_with_output_and_heatmap() -> None:
    at = _app()
    assert at.sidebar.selectbox(key="model_id").value == "toy-copy"
    assert at.metric[0].value == "hello world"
    assert _heatmap_title(at) == "encoder self-attention · layer 0 · head 0"
    tokens, card = at.dataframe[0].value, at.dataframe[1].value
    assert tokens["token"].tolist() == [*"hello·world", "</s>"]
    assert tokens["special"].tolist() == [False] * 11 + [True]
    assert card.loc["family", "value"] == "from-scratch transformer (Vaswani et al. 2017)"
    assert card.loc["task", "value"] == "copies lowercase text"


def test_switching_model_layer_head_and_site() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-reverse").run()
    assert not at.exception
    assert at.metric[0].value == "dlrow olleh"
    at.radio(key="overview_site").set_value("decoder.cross_attn").run()
    at.selectbox(key="overview_layer").set_value(1).run()
    at.selectbox(key="overview_head").set_value(3).run()
    assert not at.exception
    assert _heatmap_title(at) == "cross-attention (decoder → encoder) · layer 1 · head 3"


def test_an_example_fills_the_text_and_the_device_can_be_chosen() -> None:
    at = _app()
    pills = at.sidebar.button_group(key="examples_toy-copy")
    assert pills.options[1] == "attention"
    pills.set_value("attention").run()
    assert at.sidebar.text_input(key="text_toy-copy").value == "attention"
    assert at.metric[0].value == "attention"
    assert at.sidebar.button_group(key="examples_toy-copy").value is None  # ready to be clicked again
    at.sidebar.selectbox(key="device").set_value("cpu").run()
    assert not at.exception
    assert at.dataframe[1].value.loc["device", "value"] == "cpu"


def test_bad_text_shows_a_message_and_the_app_keeps_working() -> None:
    at = _app()
    at.sidebar.text_input(key="text_toy-copy").set_value("<img src=x onerror=alert(1)>").run()
    assert not at.exception
    assert "does not know: '<', '=', '(', '1', ')', '>'" in _error(at)
    assert "\\<" in at.error[0].value  # escaped: Markdown shows it literally
    assert not at.get("plotly_chart")
    at.sidebar.text_input(key="text_toy-copy").set_value("").run()
    assert "The text is empty" in _error(at)
    at.sidebar.text_input(key="text_toy-copy").set_value("abc").run()
    assert at.metric[0].value == "abc"
    assert not at.error


def test_a_hugging_face_folder_typed_in_the_sidebar(tmp_path) -> None:
    folder = build("bert", tmp_path / "bert")
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    assert "Type the path" in at.info[0].value
    at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
    assert not at.exception
    assert at.sidebar.text_input(key=f"text_{folder}").value == "The cat sat on the mat because it was tired."
    assert _heatmap_title(at) == "encoder self-attention · layer 0 · head 0"
    assert not at.sidebar.get("radio")  # an encoder has no output to generate
    assert _titles(at)[0] == "cosine similarity"  # an encoder's output: its token vectors
    card = at.dataframe[1].value
    assert card.loc["family", "value"] == "BERT (bert, Hugging Face)"
    assert card.loc["heads per layer", "value"] == "4"


def test_a_causal_lm_shows_its_next_token_choices(tmp_path) -> None:
    folder = build("llama", tmp_path / "llama")
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
    at.sidebar.text_input(key=f"text_{folder}").set_value("the quick brown fox").run()
    assert not at.exception
    assert _titles(at)[0] == "next token"
    bars = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    assert len(bars["y"]) == 10
    card = at.dataframe[1].value
    assert card.loc["key/value heads", "value"] == "2"
    assert card.loc["positions", "value"] == "rotary"


def test_a_model_that_cannot_be_loaded_gives_a_message(tmp_path) -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    at.sidebar.text_input(key="custom_model").set_value(str(tmp_path)).run()
    assert not at.exception
    assert "has no config.json" in _error(at)
    at.sidebar.text_input(key="custom_model").set_value("nobody/nothing").run()
    assert "cannot be reached" in _error(at)
