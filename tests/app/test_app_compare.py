"""The Attention page's Compare view without a browser: each comparison draws A, B and B − A for the chosen head,
and the difference is that of two direct runs of the model."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from tests.app.app_session import open_app_page
from tests.plotly_specs import chart, chart_specs, plotly_array
from tests.tiny_hf import build

DATE, PROMPT = "14 feb 1999", "The capital of France is"


def _compare(model_id: str, text: str, site: str, layer: int, head: int, kind: str) -> AppTest:
    at = open_app_page("app_pages/attention.py", model_id, text)
    at.radio(key="site").set_value(next(o for o in at.radio(key="site").options if o.startswith(site)))
    at.selectbox(key="layer").set_value(layer)
    at.selectbox(key="head").set_value(head)
    at.session_state["view"] = "Compare"
    at.run()
    at.radio(key="attention_compare_kind").set_value(kind).run()
    assert not at.exception, at.exception
    return at


def _difference(at: AppTest) -> np.ndarray:
    return plotly_array(chart(at, "B − A")["data"][0]["z"]).astype(np.float64)


def _direct(model_id: str, text: str, site: str, layer: int, head: int, **options) -> np.ndarray:
    trace = load_runner(model_id).run(text, options=RunOptions(hooks=("*.hook_pattern",), **options))
    return trace.head_pattern(site, layer, head).astype(np.float64)


def test_mask_on_vs_off_of_an_encoder_is_two_runs_apart() -> None:
    at = _compare("toy-date", DATE, "encoder self-attention", 1, 2, "Mask on vs off")
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(at)]
    assert titles[:2] == ["A · causal mask off", "B · causal mask on, reads A's output"]
    expected = _direct("toy-date", DATE, "encoder.attn", 1, 2, causal="on") - _direct("toy-date", DATE,
                                                                                       "encoder.attn", 1, 2)
    np.testing.assert_allclose(_difference(at), expected, atol=1e-6)
    assert np.triu(expected, 1).min() < -0.01  # the causal mask took weight from later keys


def test_another_text_of_the_same_length_and_one_of_another() -> None:
    at = _compare("toy-date", DATE, "encoder self-attention", 0, 1, "Another text")
    assert "Type a second text" in at.info[0].value
    at.text_input(key="attention_compare_text").set_value("15 mar 2000").run()
    second, first = (_direct("toy-date", text, "encoder.attn", 0, 1) for text in ("15 mar 2000", DATE))
    expected = second - first
    np.testing.assert_allclose(_difference(at), expected, atol=1e-6)
    at.text_input(key="attention_compare_text").set_value("1 may 2000").run()
    assert "different lengths (12 and 11 tokens)" in at.warning[0].value
    assert not any("B − A" in spec["layout"]["title"]["text"] for spec in chart_specs(at))


def test_an_ablation_changes_only_the_layers_after_it() -> None:
    at = _compare("smollm2", PROMPT, "decoder self-attention", 0, 3, "Before vs after an ablation")
    assert "Choose heads to ablate" in at.info[0].value
    at.multiselect(key="attention_compare_heads").set_value([("decoder.1.attn", 0), ("decoder.1.attn", 4)]).run()
    assert not at.exception
    assert np.abs(_difference(at)).max() == 0 and "the difference is 0" in at.caption[-1].value
    at.selectbox(key="layer").set_value(5).run()
    heads = (("decoder.1.attn", 0), ("decoder.1.attn", 4))
    expected = _direct("smollm2", PROMPT, "decoder.attn", 5, 3, ablated=heads) - _direct("smollm2", PROMPT,
                                                                                          "decoder.attn", 5, 3)
    np.testing.assert_allclose(_difference(at), expected, atol=1e-3)  # float16 patterns
    assert np.abs(expected).max() > 1e-3


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_a_model_that_reads_its_output_compares_on_that_output(mode: str) -> None:
    """toy-gpt-date reads the answer it wrote: B reads A's answer too (teacher-forced), ablated as chosen."""
    at = _compare("toy-gpt-date", DATE, "decoder self-attention", 2, 0, "Before vs after an ablation")
    at.multiselect(key="attention_compare_heads").set_value([("decoder.0.attn", 1)])
    at.radio(key="attention_compare_mode").set_value(mode).run()
    assert not at.warning and chart(at, "B · ")["layout"]["title"]["text"] == "B · 1 head ablated, reads A's output"
    assert "B: 1 head ablated, reads A's output" in at.caption[-1].value
    answer = load_runner("toy-gpt-date").run(DATE).output_text
    heads = (("decoder.0.attn", 1),)
    forced = load_runner("toy-gpt-date").run(DATE, answer, RunOptions(hooks=("*.hook_pattern",), ablated=heads,
                                                                       ablation=mode))
    expected = forced.head_pattern("decoder.attn", 2, 0) - _direct("toy-gpt-date", DATE, "decoder.attn", 2, 0)
    np.testing.assert_allclose(_difference(at), expected, atol=1e-6)
    assert np.abs(expected).max() > 1e-3


def test_another_model_with_the_same_tokens_and_one_without() -> None:
    """toy-copy and toy-reverse read the same characters: B − A is the same head of the two models on the same input
    (B reading A's output); MiniLM splits the text otherwise, and the view says so instead of comparing."""
    text = "hello world"
    at = _compare("toy-copy", text, "encoder self-attention", 1, 0, "Another model")
    at.selectbox(key="attention_compare_model").set_value("toy-reverse").run()
    assert not at.exception
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(at)]
    assert titles[:2] == ["A · toy-copy", "B · toy-reverse, reads A's output"]
    copied = load_runner("toy-copy").run(text)
    reversed_ = load_runner("toy-reverse").run(text, target=copied.output_text,
                                               options=RunOptions(hooks=("*.hook_pattern",)))
    expected = reversed_.head_pattern("encoder.attn", 1, 0) - copied.head_pattern("encoder.attn", 1, 0)
    np.testing.assert_allclose(_difference(at), expected, atol=1e-6)
    at.selectbox(key="attention_compare_model").set_value("minilm").run()
    assert "splits the text into other tokens" in at.warning[0].value
    assert not any("B − A" in spec["layout"]["title"]["text"] for spec in chart_specs(at))


def test_two_checkpoints_of_a_hugging_face_model(tmp_path) -> None:
    """A folder typed in as the other model: a second checkpoint of the same tiny Llama (its queries changed) reads
    the same tokens, and B − A is the two checkpoints' runs apart."""
    first = build("llama", tmp_path / "first")
    second = tmp_path / "second"
    shutil.copytree(first, second)
    model = transformers.AutoModelForCausalLM.from_pretrained(second)
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight.mul_(30.0)  # much sharper queries in layer 1
    model.save_pretrained(second)
    text = "the cat sat on the mat"
    at = open_app_page("app_pages/attention.py", folder=str(first), text=text)
    at.radio(key="site").set_value(at.radio(key="site").options[0])
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(0)
    at.session_state["view"] = "Compare"
    at.run()
    at.radio(key="attention_compare_kind").set_value("Another model").run()
    at.selectbox(key="attention_compare_model").set_value("folder").run()
    assert "Type the folder of the other model" in at.info[0].value
    at.text_input(key="attention_compare_folder").set_value(str(second)).run()
    assert not at.exception and not at.error, at.error
    runs = [load_runner(str(folder)).run(text, options=RunOptions(hooks=("*.hook_pattern",)))
            for folder in (first, second)]
    expected = (runs[1].head_pattern("decoder.attn", 1, 0).astype(np.float64)
                - runs[0].head_pattern("decoder.attn", 1, 0))
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(_difference(at), expected, atol=1e-6)
