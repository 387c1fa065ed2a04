"""The Masks page without a browser: every tab and control on every model kind, and its numbers against runs
made here directly."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from tests.app.app_session import open_app_page
from tests.tiny_hf import FAMILIES

PAGE = "app_pages/masks.py"
VIEWS = ["Masks of this run", "Scores → probabilities", "Mask on / off", "Custom mask", "Padding", "Why −∞"]


def _masks_page(model_id: str = "toy-date", text: str | None = None, folder: str | None = None) -> AppTest:
    return open_app_page(PAGE, model_id, text, folder)


def _view(at: AppTest, label: str) -> AppTest:
    at.session_state["masks_view"] = label
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _specs(at: AppTest) -> dict[str, dict]:
    return {(spec := json.loads(el.proto.spec))["layout"]["title"]["text"]: spec for el in at.get("plotly_chart")}


def _z(spec: dict, index: int = 0) -> np.ndarray:
    """A heatmap's z as plotly receives it (base64 typed array, or nested lists)."""
    z = spec["data"][index]["z"]
    if isinstance(z, dict):
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(
            [int(n) for n in z["shape"].split(",")])
    return np.array(z, dtype=np.float32)


def _every_tab(at: AppTest) -> list[list[str]]:
    """The figure titles of every tab, in order (only the open tab draws)."""
    return [list(_specs(_view(at, view))) for view in VIEWS]


def test_every_tab_on_an_encoder_decoder() -> None:
    at = _masks_page("toy-date", "may 1 2000")
    at.radio(key="site").set_value("decoder.attn").run()
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(2).run()
    titles = _every_tab(at)
    assert titles[0] == ["mask · encoder self-attention", "mask · decoder self-attention",
                         "mask · cross-attention (decoder → encoder)"]
    assert titles[1] == ["scores QKᵀ/√d_k", "scores + M", "softmax(scores + M)"]
    assert titles[2] == ["causal on (this run)", "causal off", "difference: off − on",
                         "next token"]
    assert titles[3] == []  # nothing chosen yet: the editor says what to do
    assert titles[4] == ["mask · encoder self-attention", "padded · layer 1 · head 2"]
    assert _view(at, "Why −∞").markdown[0].value.startswith("Query \\#5 \\-, layer 1 · head 2")  # escaped
    assert at.dataframe[0].value.index[0] == "#0 <s>"  # the worked row: one line a key
    keys = [button.key for button in _view(at, "Scores → probabilities").get("download_button")]
    assert {"masks_scores_csv", "masks_scores_masked_csv", "masks_probabilities_csv", "masks_scores_png"} <= set(keys)


def test_scores_after_the_mask_are_hatched_where_the_mask_hides_and_probabilities_match_the_run() -> None:
    at = _view(_masks_page("toy-gpt-date", "may 1 2000"), "Scores → probabilities")
    trace = at.session_state["trace"]
    site, layer, head = at.radio(key="site").value, at.selectbox(key="layer").value, at.selectbox(key="head").value
    specs = _specs(at)
    raw, masked, probabilities = (_z(specs[t]) for t in ["scores QKᵀ/√d_k", "scores + M", "softmax(scores + M)"])
    hidden = ~trace.masks[site]  # causal: above the diagonal
    assert hidden.any() and not np.isnan(raw).any()
    assert np.isnan(masked[hidden]).all() and np.isnan(probabilities[hidden]).all()  # no colour of the scale
    assert np.array_equal(masked[~hidden], raw[~hidden])
    np.testing.assert_allclose(probabilities[~hidden], trace.pattern(site, layer)[head][~hidden], atol=1e-6)
    assert [entry["name"] for entry in specs["scores + M"]["data"][1:]] == ["masked (−∞ before the softmax)"]


def _on_off(at: AppTest, model_id: str, text: str, site: str, layer: int, head: int) -> None:
    """The page's difference equals off − on of two runs made here."""
    runner = load_runner(model_id)
    on, off = (runner.run(text, None, RunOptions(hooks=("*.hook_pattern",), causal=mode)) for mode in ("on", "off"))
    ids = zip(on.query_ids(site), off.query_ids(site), strict=False)
    n = next((i for i, (a, b) in enumerate(ids) if a != b), min(len(on.query_ids(site)), len(off.query_ids(site))))
    expected = off.pattern(site, layer)[head][:n, :n] - on.pattern(site, layer)[head][:n, :n]
    difference = next(spec for title, spec in _specs(at).items() if title.startswith("difference"))
    np.testing.assert_allclose(_z(difference), expected, atol=1e-6)
    assert np.abs(expected).max() > 0.01  # the mask matters: the test can fail


def test_the_on_off_difference_is_the_difference_of_the_two_runs() -> None:
    at = _masks_page("toy-gpt-date", "may 1 2000")
    at.selectbox(key="layer").set_value(0)
    at.selectbox(key="head").set_value(1).run()
    _on_off(_view(at, "Mask on / off"), "toy-gpt-date", "may 1 2000", "decoder.attn", 0, 1)
    assert "next token" in _specs(at)
    at = _masks_page("minilm", "The quick brown fox")  # an encoder: the causal mask is switched on
    at.selectbox(key="layer").set_value(2)
    at.selectbox(key="head").set_value(5).run()
    at = _view(at, "Mask on / off")
    assert list(_specs(at))[:2] == ["causal on", "causal off (this run)"]
    _on_off(at, "minilm", "The quick brown fox", "encoder.attn", 2, 5)
    at = _view(_masks_page("toy-date"), "Mask on / off")
    at.radio(key="site").set_value("decoder.cross_attn").run()
    assert "choose a self-attention site" in at.info[0].value


def test_padding_columns_are_zero_and_real_outputs_unchanged() -> None:
    at = _view(_masks_page("toy-date", "may 1 2000"), "Padding")
    at.slider(key="masks_pad_to").set_value(16).run()
    assert not at.exception
    numbers = re.findall(r"\*\*([-0-9.e+]+)\*\*", at.markdown[0].value)
    assert float(numbers[0]) == 0.0 and float(numbers[1]) < 1e-4
    runner = load_runner("toy-date")
    hooks = ("encoder.0.attn.hook_pattern", "encoder.1.hook_resid_post")
    plain, padded = runner.run("may 1 2000", None, RunOptions(hooks)), runner.run("may 1 2000", None, RunOptions(
        hooks, pad_to=16))
    real = len(plain.tokens)
    assert len(padded.tokens) == 16 and real < 16
    assert (padded.pattern("encoder.attn", 0)[:, :, real:] == 0).all()
    change = np.abs(padded.captured["encoder.1.hook_resid_post"][:real] - plain.captured["encoder.1.hook_resid_post"])
    assert change.max() < 1e-4
    assert at.query_params["masks_pad_to"] == "16"


def test_a_custom_mask_reruns_and_one_that_leaves_a_query_no_key_is_refused() -> None:
    at = _view(_masks_page("toy-gpt-date", "may 1 2000"), "Custom mask")
    at.multiselect(key="masks_hide").set_value([3]).run()
    assert not at.exception
    specs = _specs(at)
    assert "mask · decoder self-attention" in specs
    legend = [entry.get("name") for entry in specs["mask · decoder self-attention"]["data"]]
    assert "hidden by your custom mask" in legend
    with_mask = _z(specs["with your mask"])
    assert np.isnan(with_mask[4:, 3]).all()  # key 3 hidden from every later query (earlier: causal anyway)
    n = len(at.session_state["trace"].tokens)  # the mask's cells hidden, counted by what hides them:
    causal, blocked = n * (n - 1) // 2, n - 3  # every key after its query; key 3 from queries 3..n-1 (before 3:
    # causal already)
    assert f"{causal + blocked:,} of {n * n:,} cells hidden ({causal:,} causal, {blocked:,} blocked)." in [
        caption.value for caption in at.caption]
    at.multiselect(key="masks_hide").set_value([0]).run()  # query 0 sees only key 0 under the causal mask
    assert not at.exception
    assert "hides every key from query position(s) [0]" in at.warning[0].value.replace("\\", "")  # Markdown-escaped
    assert not at.get("plotly_chart")  # nothing drawn: no NaN rows
    at.multiselect(key="masks_for").set_value([5]).run()  # hidden from query 5 only: fine
    assert not at.warning and "with your mask" in _specs(at)
    at.radio(key="masks_editor").set_value("window").run()
    at.slider(key="masks_window").set_value(1).run()
    assert not at.exception
    band = _z(_specs(at)["with your mask"])
    assert np.isnan(band[np.tril_indices(len(band), -2)]).all() and not np.isnan(np.diag(band)).any()
    assert at.query_params["masks_editor"] == "window" and at.query_params["masks_window"] == "1"


def test_a_link_reopens_the_custom_mask() -> None:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.query_params.update({"model": "toy-copy", "text": "abcde", "masks_editor": "hide words", "masks_hide": "1,2",
                            "masks_for": "4", "masks_view": "Custom mask"})
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert at.multiselect(key="masks_hide").value == [1, 2] and at.multiselect(key="masks_for").value == [4]
    assert np.isnan(_z(_specs(at)["with your mask"])[4, 1:3]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_tab_on_a_tiny_hugging_face_model(folders, family) -> None:
    """Every tab; T5's unscaled scores are titled so, and its relative position bias drawn apart."""
    at = _masks_page(folder=str(folders[family]), text="the cat sat on the mat")
    titles = _every_tab(at)
    if family == "t5":
        assert titles[1] == ["scores QKᵀ", "scores + M", "softmax(scores + M)", "QKᵀ (without the bias)",
                             "B (relative position)"]
    else:
        assert titles[1] == ["scores QKᵀ/√d_k", "scores + M", "softmax(scores + M)"]
    assert titles[4][0].startswith("mask · ")
    at = _view(at, "Custom mask")
    at.radio(key="masks_editor").set_value("window").run()
    assert not at.exception and "with your mask" in _specs(at)


def test_smollm2_grouped_query_heads() -> None:
    at = _masks_page("smollm2", "The capital of France is")
    at.selectbox(key="layer").set_value(3).run()
    at.selectbox(key="head").set_value(7).run()
    titles = _every_tab(at)
    assert titles[2][:2] == ["causal on (this run)", "causal off"] and "next token" in titles[2]
    assert titles[1] == ["scores QKᵀ/√d_k", "scores + M", "softmax(scores + M)"]
