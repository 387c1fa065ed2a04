"""Hostile input on every page, without a browser: texts, every URL parameter, and model folders or ids that
cannot be loaded. Each must leave a clear message, no exception, no server path, and an app that still works."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.ui.page import PAGES
from tests.hostile import CORPUS, assert_safe, make_folders, shown_text, value

CUSTOM = "custom"
NUMERIC = ("layer", "head", "row", "col", "step", "tour_head")


def _app(**params: str) -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.query_params.update(params)
    at.run()
    return at


def _still_works(at: AppTest) -> None:
    """The same session, on another model and text, shows that run (toy-reverse reverses its text)."""
    at.sidebar.selectbox(key="model_id").set_value("toy-reverse").run()
    at.sidebar.text_input(key="text").set_value("abc")
    at.sidebar.radio(key="decoder_mode").set_value("generate").run()  # a hostile target from a link is left behind
    at.switch_page(PAGES[0].path).run()
    assert_safe(at)
    assert at.code[0].value == "cba" and not at.error


@pytest.mark.parametrize("model_id", ["toy-copy", "minilm"])
def test_hostile_texts_on_every_page(model_id: str) -> None:
    at = _app(model=model_id)
    for name, entry in CORPUS["texts"].items():
        if name == "lone_surrogate":
            continue  # not a str a widget can hold (AppTest cannot send it): the URL tests and the browser send it
        at.sidebar.text_input(key="text").set_value(value(entry)).run()
        for page in PAGES:
            at.switch_page(page.path).run()
            assert_safe(at)
            step = [b for b in at.button if b.key == "generate_step" and not b.disabled]
            if step:  # the Generate page draws once a token is generated
                step[0].click().run()
                assert_safe(at)
            every = [t for t in at.toggle if t.key == "ablation_every" and not t.value]
            if every:  # the Ablate heads page draws once heads are chosen
                every[0].set_value(True).run()
                assert_safe(at)
            encoder = any(("does not generate" in i.value or "predicts no next token" in i.value)  # Generate and
                          for i in at.info)  # Attribution, on an encoder
            own_form = not page.shows_run and at.button(key="train_start")  # Train: its form, whatever the text
            assert at.error or at.get("plotly_chart") or encoder or own_form, (name, page.path)  # or the run drawn
            if name in ("empty", "whitespace") and page.shows_run:  # Train reads no text: nothing to say of it
                assert "The text is empty" in at.error[0].value
    _still_works(at)


def test_markup_in_a_text_is_shown_literally() -> None:
    at = _app(model="minilm", text=value(CORPUS["texts"]["img_onerror"]))
    assert_safe(at)
    tokens = at.dataframe[0].value["token"].tolist()
    assert tokens[1:4] == ["<", "im", "##g"]  # the markup is text the model read
    assert not any("<img" in element.value for element in at.markdown)  # never passed on as markup


def _hostile_values(parameter: str) -> list[str]:
    values = CORPUS["url_values"]
    if parameter in NUMERIC:  # markup is just one more non-number there: the numbers instead
        values = values[:3] + CORPUS["numbers"]
    if parameter in CORPUS["unknown_names"]:
        values.append(CORPUS["unknown_names"][parameter])
    return values


# The link's parameters in groups whose hostile values are tried together: the model alone; what the run reads; what
# the pages read of a run that succeeds (a valid model and text, so that every page draws and reads them).
URL_GROUPS = {"model": ("model",), "run": ("text", "tz", "target", "causal"),
              "views": ("site", "layer", "head", "colorscale", "hide_special", "values", "row", "col", "diagonal",
                        "view", "step", "tour_head", "present", "predict")}


def test_the_groups_hold_every_url_parameter_once() -> None:
    grouped = [name for names in URL_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(CORPUS["url_params"])


@pytest.mark.parametrize("group", URL_GROUPS)
def test_hostile_values_in_every_url_parameter(group: str) -> None:
    """Every hostile value of each parameter reaches every page: the i-th link sets each parameter of the group to
    its i-th hostile value (its list repeated where shorter), the others to valid ones."""
    hostile = {name: _hostile_values(name) for name in URL_GROUPS[group]}
    for i in range(max(len(values) for values in hostile.values())):
        params = {"model": "toy-date", "text": "may 1 2000"} | {name: values[i % len(values)]
                                                                for name, values in hostile.items()}
        at = _app(**params)
        for page in PAGES:
            at.switch_page(page.path).run()
            assert_safe(at)
    _still_works(at)


def test_a_lone_surrogate_is_refused_with_a_message() -> None:
    from attention_atlas.model.registry import load_runner

    with pytest.raises(ValueError, match="control characters that cannot be tokenised: U\\+D800"):
        load_runner("toy-copy").run(value(CORPUS["texts"]["lone_surrogate"]))


@pytest.fixture(scope="module")
def broken_folders(tmp_path_factory) -> dict[str, Path]:
    return make_folders(tmp_path_factory.mktemp("broken"))


EXPECTED = {  # what the message says for each broken folder of the corpus
    "empty": "has no config.json",
    "pickle_only": "no .safetensors weights (found pytorch_model.bin). Pickle checkpoints are refused",
    "malformed_config": "config.json is not valid JSON",
    "config_not_an_object": "config.json does not hold a JSON object",
    "unknown_model_type": "model type 'made_up_type' is not one the installed transformers knows",
    "unsupported_model_type": "model type 'vit' is not supported: the app opens decoder-only language models",
    "garbage_weights": "garbage_weights failed (SafetensorError); the details are in the server's log",
}


def _error(at: AppTest) -> str:
    return shown_text(at).replace("\\", "")  # messages backslash-escape Markdown


def test_model_folders_and_ids_that_cannot_be_loaded(broken_folders) -> None:
    at = _app()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM).run()
    typed = [*map(value, CORPUS["model_paths"]), *map(str, broken_folders.values())]
    for source in typed:
        at.sidebar.text_input(key="custom_model").set_value(source).run()
        assert_safe(at)
        assert len(at.error) == 1, source
        if source == "~":
            assert str(Path.home()) not in _error(at)  # quoted as typed: the server's home stays unsaid
    for name, folder in broken_folders.items():
        at.sidebar.text_input(key="custom_model").set_value(str(folder)).run()
        assert EXPECTED[name] in _error(at), (name, _error(at))
    at.sidebar.text_input(key="custom_model").set_value("made-up-user/made-up-model").run()
    assert "not in the local Hugging Face cache" in _error(at)
    at.sidebar.text_input(key="custom_model").set_value("<script>alert(1)</script>").run()
    assert "is neither a folder here nor a Hugging Face hub id" in _error(at)
    _still_works(at)


def test_a_link_with_a_text_longer_than_the_box_says_it_was_left_out() -> None:
    from attention_atlas.ui.url_state import MAX_TEXT_CHARS, pack_text

    long_text = value(CORPUS["texts"]["long_100k"])
    for params in ({"text": long_text}, {key: v for key, v in pack_text(long_text).items() if v}):
        at = _app(model="minilm", **params)
        assert_safe(at)
        box = f"The link's text has 100,004 characters; the text box holds at most {MAX_TEXT_CHARS:,}"
        assert box in at.info[0].value
        assert at.get("plotly_chart")  # the model's own example ran instead


def test_a_link_whose_packed_text_unpacks_to_gigabytes_is_left_out_unread() -> None:
    """A few kilobytes of `tz` that inflate to 64 MiB: unpacking stops at PACKED_TEXT_MOST_BYTES, and the page says
    the text was left out (before, zlib inflated all of it, and a longer link all of the server's memory)."""
    import base64
    import zlib

    from attention_atlas.ui.url_state import PACKED_TEXT_MOST_BYTES, PackedTextTooLong, unpack_text

    bomb = base64.urlsafe_b64encode(zlib.compress(b"a" * 64 * 2**20, 9)).decode()
    assert len(bomb) < 100_000
    with pytest.raises(PackedTextTooLong):
        unpack_text({"tz": bomb})
    at = _app(model="minilm", tz=bomb)
    assert_safe(at)
    assert f"The link's text unpacks to more than {PACKED_TEXT_MOST_BYTES:,} bytes" in at.info[0].value
    assert at.get("plotly_chart")  # the model's own example ran instead
