"""The view lives in the URL: a copied link reopens the same model, text, site, layer and head."""

import json

from streamlit.testing.v1 import AppTest

from tests.tiny_hf import build

ATTENTION = "app_pages/attention.py"


def _open(**params: str) -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=60)
    at.query_params.update(params)
    at.run()
    assert not at.exception
    return at


def _title(at: AppTest, index: int) -> str:
    return json.loads(at.get("plotly_chart")[index].proto.spec)["layout"]["title"]["text"]


def test_a_link_reopens_the_same_view_and_follows_changes() -> None:
    at = _open(model="toy-date", text="march 3 2021", site="decoder.cross_attn", layer="1", head="2", causal="off")
    assert at.sidebar.selectbox(key="model_id").value == "toy-date"
    assert at.sidebar.text_input(key="text").value == "march 3 2021"
    assert at.sidebar.selectbox(key="causal").value == "off everywhere"
    assert _title(at, 0) == "cross-attention (decoder → encoder) · layer 1 · head 2"
    at.switch_page(ATTENTION).run()
    assert (at.radio(key="site").value, at.selectbox(key="layer").value,
            at.selectbox(key="head").value) == ("decoder.cross_attn", 1, 2)
    assert _title(at, 0) == "cross-attention (decoder → encoder): layers × heads"  # it opens on the model view
    at.selectbox(key="head").set_value(3).run()
    at.sidebar.text_input(key="text").set_value("may 1 2000").run()
    assert {k: at.query_params[k] for k in ("model", "text", "site", "layer", "head", "causal")} == {
        "model": "toy-date", "text": "may 1 2000", "site": "decoder.cross_attn", "layer": "1", "head": "3",
        "causal": "off"}


def test_a_target_in_the_link_selects_the_given_target_mode() -> None:
    at = _open(model="toy-date", text="march 3 2021", target="2021-03-04")
    assert at.sidebar.radio(key="decoder_mode").value == "given target"
    assert at.sidebar.text_input(key="target").value == "2021-03-04"
    assert at.query_params["target"] == "2021-03-04"
    at.sidebar.radio(key="decoder_mode").set_value("generate").run()
    assert "target" not in at.query_params


def test_bad_values_in_a_link_fall_back_without_an_error() -> None:
    at = _open(model="toy-copy", site="nowhere", layer="99", head="-1", causal="sideways")
    assert not at.error
    assert at.radio(key="site").value == "encoder.attn"
    assert at.selectbox(key="layer").value == 0
    assert at.selectbox(key="head").value == 0
    assert at.sidebar.selectbox(key="causal").value == "as trained"


def test_a_folder_in_the_link_opens_as_a_custom_model(tmp_path) -> None:
    folder = build("bert", tmp_path / "bert")
    at = _open(model=str(folder), text="hello world", layer="1")
    assert at.sidebar.selectbox(key="model_id").value == "custom"
    assert at.sidebar.text_input(key="custom_model").value == str(folder)
    assert at.sidebar.text_input(key="text").value == "hello world"
    assert _title(at, 0) == "encoder self-attention · layer 1 · head 0"
    missing = _open(model=str(tmp_path / "nothing"))
    assert "nothing does not exist here: give a Hugging Face model folder" in missing.error[0].value.replace("\\", "")


def test_display_options_and_the_window_are_in_the_link(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.viz.heatmap.WINDOW", 5)
    at = _open(model="toy-copy", text="hello world", view="One head", layer="1", head="2", colorscale="Greys",
               hide_special="1", values="1", diagonal="0", row="2", col="4")
    at.switch_page(ATTENTION).run()
    assert not at.exception
    assert (at.selectbox(key="attention_colorscale").value, at.toggle(key="attention_hide_special").value,
            at.toggle(key="attention_show_values").value) == ("Greys", True, True)
    assert (at.slider(key="attention_window_row").value, at.slider(key="attention_window_col").value) == (2, 4)
    assert not at.toggle(key="attention_window_diagonal").value
    at.selectbox(key="attention_colorscale").set_value("Magma").run()
    at.slider(key="attention_window_row").set_value(3).run()
    assert {k: at.query_params[k] for k in ("colorscale", "hide_special", "values", "row", "col", "diagonal")} == {
        "colorscale": "Magma", "hide_special": "1", "values": "1", "row": "3", "col": "4", "diagonal": "0"}


def test_bad_display_options_in_a_link_fall_back() -> None:
    at = _open(model="toy-copy", text="hello world", colorscale="<script>", hide_special="yes", row="-3")
    at.switch_page(ATTENTION).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="attention_colorscale").value == "Viridis"
    assert not at.toggle(key="attention_hide_special").value


def test_a_long_text_travels_compressed_and_comes_back_whole() -> None:
    text = "The cat sat on the mat. " * 60  # 1,440 characters
    at = _open(model="minilm")
    at.sidebar.text_input(key="text").set_value(text).run()
    assert "text" not in at.query_params and len(at.query_params["tz"]) < len(text) / 3
    again = _open(model="minilm", tz=at.query_params["tz"])
    assert again.sidebar.text_input(key="text").value == text
    broken = _open(model="minilm", tz="not*base64")
    assert not broken.exception and broken.sidebar.text_input(key="text").value  # falls back to the example


def test_decoding_settings_travel_in_the_link() -> None:
    params = {"decoding": "sample", "temperature": "0.7", "top_k": "5", "top_p": "0.9", "seed": "3", "max_new": "4"}
    at = _open(model="toy-date", text="14 feb 1999", **params)
    at.switch_page("app_pages/generate.py").run()
    assert not at.exception and not at.error
    assert at.radio(key="generate_method").value == "sample"
    assert [at.number_input(key=f"generate_{name}").value for name in ("temperature", "top_k", "top_p", "seed",
                                                                     "max_new")] == [0.7, 5, 0.9, 3, 4]
    at.number_input(key="generate_seed").set_value(8).run()
    assert at.query_params["seed"] == "8" and at.query_params["temperature"] == "0.7"
    at.radio(key="generate_method").set_value("greedy").run()
    assert at.query_params["decoding"] == "greedy" and at.query_params["max_new"] == "4"
    assert not {"temperature", "top_k", "top_p", "seed"} & set(at.query_params)  # greedy: nothing to sample with


def test_bad_decoding_settings_in_a_link_fall_back() -> None:
    at = _open(model="toy-date", text="14 feb 1999", decoding="<script>", temperature="nan", top_p="1e999",
               top_k="-1", seed="x", max_new="9" * 40)
    at.switch_page("app_pages/generate.py").run()
    assert not at.exception
    assert at.radio(key="generate_method").value == "greedy"
    assert at.number_input(key="generate_temperature").value == 1.0
    assert at.number_input(key="generate_top_p").value == 1.0
    assert at.number_input(key="generate_top_k").value == 0 and at.number_input(key="generate_seed").value == 0
