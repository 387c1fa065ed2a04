"""The view lives in the URL: a copied link reopens the same model, text, site, layer and head."""

import json

from streamlit.testing.v1 import AppTest

from tests.tiny_hf import build

ATTENTION = "app_pages/attention.py"


def _open(**params: str) -> AppTest:
    at = AppTest.from_file("../app.py", default_timeout=60)
    at.query_params.update(params)
    at.run()
    assert not at.exception
    return at


def _title(at: AppTest, index: int) -> str:
    return json.loads(at.get("plotly_chart")[index].proto.spec)["layout"]["title"]["text"]


def test_a_link_reopens_the_same_view_and_follows_changes() -> None:
    at = _open(model="toy-date", text="march 3 2021", site="decoder.cross_attn", layer="1", head="2", causal="off")
    assert at.sidebar.selectbox(key="model_id").value == "toy-date"
    assert at.sidebar.text_input(key="text_toy-date").value == "march 3 2021"
    assert at.sidebar.selectbox(key="causal").value == "off everywhere"
    assert _title(at, -1) == "cross-attention (decoder → encoder) · layer 1 · head 2"
    at.switch_page(ATTENTION).run()
    assert (at.radio(key="attention_site").value, at.selectbox(key="attention_layer").value,
            at.selectbox(key="attention_head").value) == ("decoder.cross_attn", 1, 2)
    assert _title(at, 0) == "cross-attention (decoder → encoder): layers × heads"  # it opens on the model view
    at.selectbox(key="attention_head").set_value(3).run()
    at.sidebar.text_input(key="text_toy-date").set_value("may 1 2000").run()
    assert {k: at.query_params[k] for k in ("model", "text", "site", "layer", "head", "causal")} == {
        "model": "toy-date", "text": "may 1 2000", "site": "decoder.cross_attn", "layer": "1", "head": "3",
        "causal": "off"}


def test_a_target_in_the_link_selects_the_given_target_mode() -> None:
    at = _open(model="toy-date", text="march 3 2021", target="2021-03-04")
    assert at.sidebar.radio(key="decoder_mode").value == "given target"
    assert at.sidebar.text_input(key="target_toy-date").value == "2021-03-04"
    assert at.query_params["target"] == "2021-03-04"
    at.sidebar.radio(key="decoder_mode").set_value("generate").run()
    assert "target" not in at.query_params


def test_bad_values_in_a_link_fall_back_without_an_error() -> None:
    at = _open(model="toy-copy", site="nowhere", layer="99", head="-1", causal="sideways")
    assert not at.error
    assert at.radio(key="overview_site").value == "encoder.attn"
    assert at.selectbox(key="overview_layer").value == 0
    assert at.selectbox(key="overview_head").value == 0
    assert at.sidebar.selectbox(key="causal").value == "as trained"


def test_a_folder_in_the_link_opens_as_a_custom_model(tmp_path) -> None:
    folder = build("bert", tmp_path / "bert")
    at = _open(model=str(folder), text="hello world", layer="1")
    assert at.sidebar.selectbox(key="model_id").value == "custom"
    assert at.sidebar.text_input(key="custom_model").value == str(folder)
    assert at.sidebar.text_input(key=f"text_{folder}").value == "hello world"
    assert _title(at, -1) == "encoder self-attention · layer 1 · head 0"
    missing = _open(model=str(tmp_path / "nothing"))
    assert "is not in the local Hugging Face cache" in missing.error[0].value.replace("\\", "")
