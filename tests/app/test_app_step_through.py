"""The Step-through page without a browser: every control, on every model kind."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_session import open_app_page

PAGE = "app_pages/step_through.py"
STEPS = ["1 · X and the weights", "2 · Q, K, V", "3 · Scores → pattern", "4 · × V, W_O, residual, norm"]


def _page(model_id: str = "toy-date", text: str | None = None, folder: str | None = None,
          params: dict[str, str] | None = None) -> AppTest:
    return open_app_page(PAGE, model_id, text, folder, params)


def _step(at: AppTest, number: int) -> AppTest:
    """Open the page's tab `number` (1-4): only the open one is drawn."""
    at.session_state["step_view"] = STEPS[number - 1]
    at.run()
    assert not at.exception, at.exception[0].message
    return at


def _specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _titles(at: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in _specs(at)]


def _differences(at: AppTest) -> dict[str, float]:
    """The page's check table: step -> max |recomputed − model|."""
    table = at.table[0].value
    return {step: float(value) for step, value in zip(table["step"], table["max |recomputed − model|"], strict=True)}


def _assert_checks_pass(at: AppTest) -> None:
    diff = _differences(at)
    assert diff["head output Z = A V"] < 1e-5 and diff["Concat(heads) W_O + b_O"] < 1e-5
    assert diff["residual add"] < 1e-5 and diff["pattern (softmax)"] < 1e-3  # HF patterns are kept in float16
    assert f"{diff['head output Z = A V']:.2e}" in at.success[0].value


def test_every_site_layer_and_head_of_an_encoder_decoder() -> None:
    at = _page()
    for site in ["encoder.attn", "decoder.attn", "decoder.cross_attn"]:
        at.radio(key="site").set_value(site).run()
        for layer, head in [(0, 0), (1, 3)]:
            at.selectbox(key="layer").set_value(layer)
            at.selectbox(key="head").set_value(head).run()
            assert not at.exception
            _assert_checks_pass(at)
            assert _differences(at)["pattern (softmax)"] < 1e-5  # the from-scratch model keeps float32
            titles = _titles(at)
            assert f"W_Q, the slice of head {head} · (d_model, d_head) = (64, 16)" in titles
            normalised = "ln1.hook_normalized × weight + bias"  # cross-attention reads ln1's output
            x_hook = "hook_resid_pre" if site in ("encoder.attn", "decoder.attn") else normalised
            assert titles[0].startswith(f"X ({site.split('.')[0]}.{layer}.{x_hook})")  # post-norm: the stream
    assert "X_enc (the encoder's output) · (source tokens, d_model)" in " ".join(_titles(at))
    assert at.query_params["site"] == "decoder.cross_attn" and at.query_params["head"] == "3"


def test_the_numbers_toggle_and_the_followed_query() -> None:
    at = _page("toy-date", "may 1 2000")
    at.radio(key="site").set_value("decoder.attn").run()
    _step(at, 3)
    pattern = next(s for s in _specs(at) if s["layout"]["title"]["text"].startswith("A, the attention pattern"))
    assert "texttemplate" not in pattern["data"][0]
    masked = next(s for s in _specs(at) if s["layout"]["title"]["text"].startswith("S + M"))
    assert masked["layout"]["images"] and masked["data"][1]["name"].startswith("masked")  # hatched −∞ cells
    length = len(at.selectbox(key="step_query").options)
    at.toggle(key="step_show_values").set_value(True).run()
    small = [s for s in _specs(at) if max(int(n) for n in s["data"][0]["z"]["shape"].split(",")) <= 16]
    assert small and all(s["data"][0]["texttemplate"] == "%{z:.2f}" for s in small)
    assert at.query_params["step_values"] == "1"
    row = at.dataframe[-1].value  # (Q·K, scaled, + mask, softmax) x keys
    assert list(row.index) == ["Q·K", "scaled", "+ mask", "softmax"] and row.shape[1] == length
    assert row.loc["softmax"].iloc[1:].sum() == 0  # query 0 sees only itself (causal)
    at.selectbox(key="step_query").set_value(length - 1).run()
    row = at.dataframe[-1].value
    assert abs(row.loc["softmax"].sum() - 1) < 1e-6 and (row.loc["softmax"] > 0).all()
    assert at.query_params["step_query"] == str(length - 1)
    keys = {b.key for b in at.get("download_button")}
    assert "step_pattern_csv" in keys and not {"step_x_csv", "step_w_o_csv"} & keys  # the open tab's alone
    assert {"step_w_o_csv", "step_norm_csv"} <= {b.key for b in _step(at, 4).get("download_button")}
    assert "step_x_csv" in {b.key for b in _step(at, 1).get("download_button")}


def test_a_decoder_only_toy_model_every_layer() -> None:
    at = _page("toy-gpt-date", "may 1 2000")
    assert at.radio(key="site").options == ["decoder self-attention (masked)"]
    for layer in range(len(at.selectbox(key="layer").options)):
        at.selectbox(key="layer").set_value(layer)
        at.selectbox(key="head").set_value(layer % 4).run()
        assert not at.exception
        _assert_checks_pass(at)
        assert _titles(at)[0].startswith(f"X (decoder.{layer}.hook_resid_pre)")
        titles = _titles(_step(at, 3))
        tokens = len(at.selectbox(key="step_query").options)  # the whole sequence: prompt, separator, answer
        assert f"A, the attention pattern · (query tokens, key tokens) = ({tokens}, {tokens})" in titles
        assert "step_masked_html" in {b.key for b in at.get("download_button")}
        _step(at, 1)
    assert at.success[0].value.startswith("Recomputed here from the weights and X")


def test_a_link_reopens_the_page_state() -> None:
    at = _page(params={"model": "toy-date", "text": "march 3 2021", "site": "decoder.attn", "layer": "1",
                       "head": "2", "step_values": "1", "step_query": "3", "step_view": STEPS[2]})
    assert at.toggle(key="step_show_values").value is True
    assert at.selectbox(key="step_query").value == 3  # the tab the link names is open
    assert any(title.startswith("A, the attention pattern") for title in _titles(at))
    assert at.radio(key="site").value == "decoder.attn" and (at.selectbox(key="layer").value,
                                                             at.selectbox(key="head").value) == (1, 2)


def test_minilm_and_smollm2() -> None:
    at = _page("minilm")
    _assert_checks_pass(at)
    assert _titles(at)[0].startswith("X (encoder.")
    at = _page("smollm2", "The capital of France is")
    at.selectbox(key="layer").set_value(2)
    at.selectbox(key="head").set_value(4).run()
    _assert_checks_pass(at)
    assert "Query head 4 reads key/value head 1 (as do query heads 3–5)" in at.info[0].value
    assert _titles(at)[0] == "X (decoder.2.ln1.hook_normalized × weight + bias) · (tokens, d_model) = (5, 576)"
    assert any("first 48 of 576 columns" in c.value for c in at.caption)  # large ones are cut, and said so
    titles = _titles(_step(at, 2))
    assert {"Q · (tokens, d_head) = (5, 64)", "Q after the rotation · (tokens, d_head) = (5, 64)",
            "K after the rotation · (key tokens, d_head) = (5, 64)"} <= set(titles)  # 5 tokens, before and after


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5", "bart", "marian"])
def test_tiny_hugging_face_models(folders, family: str) -> None:
    at = _page(folder=str(folders[family]), text="the quick brown fox")
    for site in at.radio(key="site").options:
        at.radio(key="site").set_value(site).run()
        at.selectbox(key="layer").set_value(1)
        at.selectbox(key="head").set_value(3).run()
        assert not at.exception
        _assert_checks_pass(at)
    latex = " ".join(el.value for el in _step(at, 3).get("latex"))
    assert ("no division by" in latex) == (family == "t5")


def test_a_change_of_layer_reads_the_same_run_for_a_short_text(monkeypatch) -> None:
    """A sentence's every layer is captured at once (a few MB): choosing another layer runs no model."""
    at = _page("toy-gpt-date")
    from attention_atlas.model.toy.runner import ToyRunner

    runs: list[int] = []
    real_run = ToyRunner.run
    monkeypatch.setattr(ToyRunner, "run", lambda self, *args, **kwargs: runs.append(1) or real_run(self, *args,
                                                                                                      **kwargs))
    for layer in (1, 2, 0):
        at.selectbox(key="layer").set_value(layer).run()
        assert not at.exception
        assert "pattern matches the model's" in at.success[0].value
    assert runs == []
