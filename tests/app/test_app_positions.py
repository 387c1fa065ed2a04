"""The Positional encoding page without a browser: every control, every model kind, refused sizes, the link."""

import base64
import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_session import open_app_page

PAGE = "app_pages/positions.py"
VIEWS = ["Sinusoid", "Waves", "Similarity", "Shift = rotation", "This model", "Your tokens"]


def _page(model_id: str = "toy-date", text: str | None = None, folder: str | None = None,
          **params: str) -> AppTest:
    """The page on `model_id` (or a custom `folder`), opened through a link carrying `params`."""
    return open_app_page(PAGE, model_id, text, folder, params)


def _view(at: AppTest, view: str) -> AppTest:
    at.session_state["positions_view"] = view
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def _specs(at: AppTest) -> dict[str, dict]:
    return {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
            for c in at.get("plotly_chart")}


def _z(spec: dict) -> np.ndarray:
    z = spec["data"][0]["z"]
    shape = [int(n) for n in z["shape"].split(",")]
    return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape)


def _caption(at: AppTest, part: str) -> str:
    return next(c.value for c in at.caption if part in c.value)


def _altair(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def test_the_sinusoid_on_the_page_is_the_models_own_buffer() -> None:
    at = _page("toy-date", "may 1 2000")
    runner = at.session_state["trace"]
    tokens = len(runner.tokens)
    assert at.number_input(key="positions_length").value == tokens  # defaults: the text's length, the model's d
    assert at.number_input(key="positions_d_model").value == 64
    at.number_input(key="positions_length").set_value(64).run()
    spec = _specs(at)["sinusoid · 64 positions × d_model 64"]
    from attention_atlas.model.registry import load_runner  # the same weights the app loaded

    buffer = load_runner("toy-date").toy.model.encoder.pos_table.numpy()  # (64, 64)
    np.testing.assert_array_equal(_z(spec), buffer)
    _view(at, "This model")
    assert _caption(at, "max |table − the formula| over its first 64 rows")
    model_table = _z(_specs(at)["this model · rows 0–63 of its table"])
    np.testing.assert_array_equal(model_table, buffer)


def test_every_control_on_an_encoder_decoder() -> None:
    at = _page("toy-date", "may 1 2000")
    assert at.radio(key="positions_stack").options == ["encoder", "decoder"]
    at.number_input(key="positions_length").set_value(20).run()
    at.number_input(key="positions_d_model").set_value(16).run()
    assert list(_specs(at)) == ["sinusoid · 20 positions × d_model 16"]
    _view(at, "Waves")
    at.multiselect(key="positions_dims").set_value([2, 3, 15]).run()
    chart = _altair(at)[0]
    assert chart["title"] == "waves of 3 dimensions over 20 positions"
    assert chart["encoding"]["color"]["sort"] == ["dim 2", "dim 3", "dim 15"]
    assert chart["params"][0]["bind"] == "legend"  # click a dimension in the legend to pick it out
    _view(at, "Similarity")
    dot = _z(_specs(at)["sinusoid · dot product of positions"])
    assert dot[0, 0] == pytest.approx(8.0)  # d/2
    at.radio(key="positions_measure").set_value("cosine").run()
    cosine = _z(_specs(at)["sinusoid · cosine of positions"])
    np.testing.assert_allclose(cosine, dot / 8.0, atol=1e-6)
    assert [c["title"] for c in _altair(at)] == ["distance profile · cosine vs offset k"]
    _view(at, "Shift = rotation")
    at.number_input(key="positions_offset").set_value(5).run()
    at.number_input(key="positions_pos").set_value(14).run()
    at.number_input(key="positions_pair").set_value(7).run()
    error = float(re.search(r"= ([0-9.e+-]+)\*\*", at.markdown[0].value).group(1))
    assert error <= 1e-6
    table = at.dataframe[0].value
    assert len(table) == 8 and list(table.columns[3:5]) == ["PE(#14) sin", "PE(#14) cos"]
    assert table["|error|"].to_numpy().max() <= 1e-6
    assert at.number_input(key="positions_pos").proto.max == 14  # pos + k stays inside the table
    at.radio(key="positions_stack").set_value("decoder").run()
    _view(at, "Your tokens")
    assert list(_specs(at)) == ["decoder · token embedding", "decoder · positional part", "decoder · sum"]
    assert at.query_params["positions_stack"] == "decoder" and at.query_params["positions_offset"] == "5"


def test_the_embedding_sum_is_token_plus_position() -> None:
    at = _view(_page("toy-gpt-date", "may 1 2000"), "Your tokens")
    assert "positions_stack" not in [radio.key for radio in at.radio]  # one stack: nothing to choose
    specs = _specs(at)
    embed, position, total = (_z(specs[f"decoder · {part}"]) for part in ("token embedding", "positional part", "sum"))
    np.testing.assert_allclose(embed + position, total, atol=1e-5)
    np.testing.assert_allclose(position, _z_table("toy-gpt-date", len(total)), atol=1e-7)
    assert specs["decoder · sum"]["data"][0]["y"][0] == "#0 &lt;s&gt;"


def _z_table(model_id: str, length: int) -> np.ndarray:
    from attention_atlas.model.registry import load_runner

    return load_runner(model_id).toy.model.decoder.pos_table[:length].numpy()


@pytest.mark.parametrize(("length", "d_model", "message"), [
    (65, 64, "at most 64"), (10, 7, "must be even (7 is odd)"), (10, 100_000, "between 2 and 8,192")])
def test_a_size_that_cannot_be_drawn_is_refused_with_a_message(length: int, d_model: int, message: str) -> None:
    at = _page("toy-date", "may 1 2000")
    at.number_input(key="positions_length").set_value(length).run()
    at.number_input(key="positions_d_model").set_value(d_model).run()
    assert not at.exception and message in at.error[0].value and not at.get("plotly_chart")
    at.session_state["positions_view"] = "This model"
    at.run()
    assert not at.exception and len(at.get("plotly_chart")) == 4  # the model's own views still draw


def test_a_real_encoder_and_a_rotary_decoder() -> None:
    at = _view(_page("minilm", "The quick brown fox"), "This model")
    assert "**Learned** · from `embeddings.position_embeddings`" in at.markdown[0].value
    _view(at, "Your tokens")
    assert _caption(at, "token-type vector") and len(at.get("plotly_chart")) == 3
    at = _view(_page("smollm2", "The capital of France is"), "This model")
    assert at.number_input(key="positions_d_model").value == 576
    assert "**Rotary**" in at.markdown[0].value
    titles = [c["title"] for c in _altair(at)]
    assert titles == ["frequency of each dimension pair", "rotated q·k vs distance"]
    assert _caption(at, "base = 100000, rotated dimensions r = 64")
    _view(at, "Your tokens")
    assert "adds no positional vector" in at.info[0].value and list(_specs(at)) == ["decoder · token embedding"]


@pytest.mark.parametrize(("family", "kind"), [("bert", "Learned"), ("gpt2", "Learned"), ("llama", "Rotary"),
                                              ("t5", "Relative"), ("bart", "Learned"), ("marian", "Sinusoidal")])
def test_every_hugging_face_family(folders, family: str, kind: str) -> None:
    at = _page(folder=str(folders[family]))
    for view in VIEWS:
        _view(at, view)
        if view == "This model":
            assert at.markdown[0].value.startswith(f"**{kind}**")
    if family in ("t5", "bart", "marian"):
        at.radio(key="positions_stack").set_value("decoder").run()
        assert not at.exception and not at.error
    if family == "t5":
        assert "relative position bias per head" in _specs(_view(at, "This model"))
    if family == "marian":
        caption = _caption(_view(at, "This model"), "max |table")
        assert float(caption.split("= ")[1].split(" ")[0]) <= 1e-6  # the sinusoid, sines first


def test_the_defaults_follow_the_text_until_changed() -> None:
    at = _page("toy-copy", "abc")
    assert at.number_input(key="positions_length").value == 4  # a, b, c, </s>
    at.sidebar.text_input(key="text").set_value("abcdef").run()
    assert at.number_input(key="positions_length").value == 7
    at.number_input(key="positions_length").set_value(30).run()
    at.sidebar.text_input(key="text").set_value("ab").run()
    assert at.number_input(key="positions_length").value == 30  # the person's choice stays


def test_a_link_reopens_the_page_state() -> None:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.query_params.update(model="toy-date", text="may 1 2000", positions_length="40", positions_d_model="32",
                           positions_measure="cosine", positions_stack="decoder")
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert at.number_input(key="positions_length").value == 40 and at.number_input(key="positions_d_model").value == 32
    assert at.radio(key="positions_measure").value == "cosine" and at.radio(key="positions_stack").value == "decoder"
    assert list(_specs(at)) == ["sinusoid · 40 positions × d_model 32"]
