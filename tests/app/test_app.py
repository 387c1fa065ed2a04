"""The app as a person uses it, without a browser (streamlit.testing.v1.AppTest)."""

import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.viz.heatmap import SMALL_WINDOW
from attention_atlas.viz.outputs import percent
from tests.plotly_specs import plotly_array
from tests.tiny_hf import build

APP = "../../app.py"
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
    """The attention heatmap is the page's first figure."""
    return _titles(at)[0]


def previous_token_share(trace, layer: int) -> np.ndarray:
    """(heads,): the mean weight each query but the first puts on the token before it, from the whole pattern."""
    pattern = trace.pattern_source("encoder.attn", layer).pattern(dtype=np.float32)  # (heads, n, n)
    rows = np.arange(1, pattern.shape[-1])
    return pattern[:, rows, rows - 1].mean(-1)


def test_opens_on_a_real_model_with_a_head_that_shows_structure() -> None:
    at = _app()
    assert at.sidebar.selectbox(key="model_id").value == "minilm"
    assert at.subheader[0].value == "Attention Atlas · minilm"
    assert at.markdown[0].value.startswith("Attention Atlas runs a real transformer")
    trace = at.session_state["trace"]
    layer, head = at.selectbox(key="layer").value, at.selectbox(key="head").value
    assert layer is not None and head is not None  # the page opens on a chosen head
    share = previous_token_share(trace, layer)  # (heads,)
    assert share[head] > 0.9 and share[head] == pytest.approx(max(  # the clearest previous-token head of the model
        previous_token_share(trace, i).max() for i in range(6)), abs=1e-6)
    assert _heatmap_title(at) == f"encoder self-attention · layer {layer} · head {head}"
    assert at.caption[0].value.startswith(f"Layer {layer} · head {head} puts {percent(share[head])} of each token's")
    at.selectbox(key="head").set_value((head + 1) % 12).run()
    assert "previous-token head" not in at.caption[0].value  # said only of the head it is true of


def test_a_toy_model_with_output_tokens_and_card() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    assert at.sidebar.text_input(key="text").value == "hello world"  # MiniLM's sentence has capitals: not readable
    assert "toy-copy cannot read the text you had" in at.info[0].value
    assert at.code[0].value == "hello world"
    tokens, card = at.dataframe[0].value, at.table[0].value
    assert tokens["token"].tolist() == [*"hello·world", "</s>"]
    assert tokens["special"].tolist() == [False] * 11 + [True]
    assert card.loc["family", "value"] == "from-scratch transformer (Vaswani et al. 2017)"
    assert card.loc["task", "value"] == "copies lowercase text"
    assert card.loc["exact match on held-out examples", "value"] == "100.0%"
    assert not any("/" in value for value in card["value"])  # no server path, no raw training keys


def test_switching_model_layer_head_and_site() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-reverse").run()
    at.sidebar.text_input(key="text").set_value("hello world").run()
    assert not at.exception
    assert at.code[0].value == "dlrow olleh"
    at.radio(key="site").set_value("decoder.cross_attn").run()
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(3).run()
    assert not at.exception
    assert _heatmap_title(at) == "cross-attention (decoder → encoder) · layer 1 · head 3"


def test_an_example_fills_the_text_and_the_device_can_be_chosen() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    pills = at.sidebar.button_group(key="examples_toy-copy")
    assert pills.options[1] == "attention"
    pills.set_value("attention").run()
    assert at.sidebar.text_input(key="text").value == "attention"
    assert at.code[0].value == "attention"
    assert at.sidebar.button_group(key="examples_toy-copy").value is None  # ready to be clicked again
    at.sidebar.selectbox(key="device").set_value("cpu").run()
    assert not at.exception
    assert at.table[0].value.loc["device", "value"] == "cpu"


def test_the_precision_can_be_chosen_and_the_model_card_says_it() -> None:
    at = _app()  # MiniLM
    assert at.sidebar.selectbox(key="precision").value == "auto"
    assert at.table[0].value.loc["precision", "value"] == "float32"  # auto on a CPU
    at.sidebar.selectbox(key="precision").set_value("bfloat16").run()
    assert not at.exception and not at.error
    assert at.table[0].value.loc["precision", "value"] == "bfloat16"
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    assert at.table[0].value.loc["precision", "value"] == "float32"  # the toy models always are


def test_bad_text_shows_a_message_and_the_app_keeps_working() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    at.sidebar.text_input(key="text").set_value("<img src=x onerror=alert(1)>").run()
    assert not at.exception
    assert "does not know: '<', '=', '(', '1', ')', '>'" in _error(at)
    assert "\\<" in at.error[0].value  # escaped: Markdown shows it literally
    assert not at.get("plotly_chart")
    at.sidebar.text_input(key="text").set_value("").run()
    assert "The text is empty" in _error(at)
    at.sidebar.text_input(key="text").set_value("abc").run()
    assert at.code[0].value == "abc"
    assert not at.error


def test_a_hugging_face_folder_typed_in_the_sidebar(tmp_path) -> None:
    folder = build("bert", tmp_path / "bert")
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    assert "Type the path" in at.info[0].value
    at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
    assert not at.exception
    assert at.sidebar.text_input(key="text").value == "The cat sat on the mat because it was tired."
    layer, head = at.selectbox(key="layer").value, at.selectbox(key="head").value  # the new model's opening head
    assert _heatmap_title(at) == f"encoder self-attention · layer {layer} · head {head}"
    assert not at.sidebar.get("radio")  # an encoder has no output to generate
    assert _titles(at)[1] == "cosine similarity"  # an encoder's output: its token vectors
    card = at.table[0].value
    assert card.loc["family", "value"] == "BERT (bert, Hugging Face)"
    assert card.loc["heads per layer", "value"] == "4"


def test_a_causal_lm_shows_its_next_token_choices(tmp_path) -> None:
    folder = build("llama", tmp_path / "llama")
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
    at.sidebar.text_input(key="text").set_value("the quick brown fox").run()
    assert not at.exception
    assert _titles(at)[1] == "next token"
    bars = json.loads(at.get("plotly_chart")[1].proto.spec)["data"][0]
    assert len(bars["y"]) == 10
    card = at.table[0].value
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


def test_every_sidebar_control_says_what_it_does() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-date").run()
    controls = [*at.sidebar.selectbox, *at.sidebar.text_input, *at.sidebar.radio]
    assert {c.key for c in controls} >= {"model_id", "text", "device", "precision", "decoder_mode", "causal"}
    assert all(c.help for c in controls), [c.key for c in controls if not c.help]


def test_the_chosen_head_and_options_survive_a_visit_to_another_page() -> None:
    at = _app()
    at.switch_page("app_pages/attention.py").run()
    at.selectbox(key="layer").set_value(3).run()
    at.selectbox(key="head").set_value(7).run()
    at.selectbox(key="attention_colorscale").set_value("Magma").run()
    at.switch_page("app_pages/overview.py").run()
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (3, 7)
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (3, 7)
    assert at.selectbox(key="attention_colorscale").value == "Magma"


def test_switching_model_keeps_a_text_the_new_model_can_read() -> None:
    at = _app()
    at.sidebar.text_input(key="text").set_value("Attention is all you need").run()
    at.sidebar.selectbox(key="model_id").set_value("smollm2").run()
    assert at.sidebar.text_input(key="text").value == "Attention is all you need"
    assert not any("cannot read" in message.value for message in at.info)


def test_the_overview_head_downloads_as_a_csv_with_positions_in_the_headers() -> None:
    from attention_atlas.ui.downloads import matrix_table

    at = _app()
    assert "overview_heatmap_csv" in [b.key for b in at.get("download_button")]
    table = matrix_table(np.eye(3), ["o", "o", "k"], ["o", "o", "k"])
    assert list(table.columns) == ["#0 o", "#1 o", "#2 k"] and list(table.index) == list(table.columns)


def test_a_weak_opening_head_is_not_called_a_previous_token_head() -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value("toy-date").run()
    caption = at.caption[0].value
    assert "looks at the token before each token more than any other head" in caption
    assert "previous-token head" not in caption


def test_a_long_text_shows_the_last_cells_of_the_head_and_says_which() -> None:
    """Over SMALL_WINDOW tokens the Overview draws the last SMALL_WINDOW x SMALL_WINDOW cells (a diagonal still shows
    at about 3 px a cell), and its caption names the rows and columns drawn; the figure holds those weights."""
    at = _app()
    at.sidebar.text_input(key="text").set_value("the cat sat on the mat " * 40).run()
    assert not at.exception
    trace = at.session_state["trace"]
    n = len(trace.tokens)
    assert n > SMALL_WINDOW
    first = n - SMALL_WINDOW
    assert any(c.value.startswith(f"Drawn: query rows {first}–{n - 1} and key columns {first}–{n - 1} of {n:,} × {n:,}")
               for c in at.caption)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    layer, head = at.selectbox(key="layer").value, at.selectbox(key="head").value
    drawn = plotly_array(spec["z"]).astype(np.float32)
    expected = trace.head_pattern("encoder.attn", layer, head)[first:, first:]
    assert drawn.shape == (SMALL_WINDOW, SMALL_WINDOW)
    np.testing.assert_allclose(drawn, expected, atol=1e-3)


def test_the_frames_run_reduces_every_site_in_the_run_and_the_views_read_that() -> None:
    """A Hugging Face model's frame run makes each site's summary on the model's device (RunOptions.summarised):
    the model view, head statistics, rollout and opening head read it, not a second pass."""
    from attention_atlas.ui.site_summary import site_summary

    at = _app()
    trace = at.session_state["trace"]
    assert trace.options.summarised
    assert set(trace.summaries) == set(trace.sites()) == {"encoder.attn"}
    assert site_summary(trace, "encoder.attn") is trace.summaries["encoder.attn"]
    layer, head = at.selectbox(key="layer").value, at.selectbox(key="head").value
    shares = trace.summaries["encoder.attn"].statistics[:, :, 3]  # (layers, heads): to the previous token
    assert (layer, head) == np.unravel_index(np.nanargmax(shares), shares.shape)  # the opening head comes from it
