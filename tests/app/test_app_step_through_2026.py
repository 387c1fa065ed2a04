"""The Step-through page on 2026's attention: DeepSeek-V2/V3's multi-head latent attention drawn with its latents'
real shapes and every step held to the model's hooks; GPT-OSS's sink in the softmax's formula."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.inspect import head_math
from tests.app.app_session import open_app_page
from tests.tiny_hf import MLA_TYPES, build_type
from tests.tiny_hybrids import build_hybrid
from tests.tiny_sinks import SINKS, build_gpt_oss

PAGE = "app_pages/step_through.py"
STEPS = ["1 · X and the weights", "2 · Q, K, V", "3 · Scores → pattern", "4 · × V, W_O, residual, norm"]
TEXT = "the quick brown fox"  # 5 tokens with <s>


def _step(at: AppTest, number: int) -> AppTest:
    at.session_state["step_view"] = STEPS[number - 1]
    at.run()
    assert not at.exception and not at.error, (at.exception or at.error)[0].message
    return at


def _titles(at: AppTest) -> list[str]:
    return [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]


def _differences(at: AppTest) -> dict[str, float]:
    table = at.table[0].value
    return {step: float(value) for step, value in zip(table["step"], table["max |recomputed − model|"], strict=True)}


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_deepseek_step_through_shows_the_latents_and_holds_every_step(tmp_path: Path, model_type: str) -> None:
    at = open_app_page(PAGE, text=TEXT, folder=str(build_type(model_type, tmp_path / model_type)))
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(2).run()
    assert not at.exception and not at.error
    diff = _differences(at)
    assert {"V", "Q as attention read it", "K as attention read it", "scores before the mask",
            "head output Z = A V", "Concat(heads) W_O + b_O", "residual add"} <= set(diff)
    assert max(v for step, v in diff.items() if step != "pattern (softmax)") < 1e-5
    assert diff["pattern (softmax)"] < 1e-3  # the float16 copy
    titles = set(_titles(_step(at, 1)))
    queries = ({"W_qa (q_a_proj), every head's · (d_model, q_rank) = (32, 16)",
                "c_Q = RMSNorm(X W_qa) · (tokens, q_rank) = (5, 16)",
                "W_Q, head 2's columns · (q_rank, nope + rope) = (16, 12)"} if model_type == "deepseek_v3" else
               {"W_Q, head 2's columns · (d_model, nope + rope) = (32, 12)"})
    assert queries | {"W_kva (kv_a_proj_with_mqa) · (d_model, rank + rope) = (32, 20)",
                      "c_KV, the latent after its RMSNorm · (key tokens, rank) = (5, 16)",
                      "W_K, head 2's key columns of W_kvb · (rank, nope) = (16, 8)",
                      "W_V, head 2's value columns of W_kvb · (rank, d_value) = (16, 6)"} <= titles
    assert any(r"c_{KV} = \mathrm{RMSNorm}(a)" in el.value for el in at.get("latex"))
    titles = set(_titles(_step(at, 2)))
    assert {"Q · (tokens, d_head) = (5, 12)", "V · (key tokens, d_value) = (5, 6)",
            "K after the rotation · (key tokens, d_head) = (5, 12)"} <= titles
    assert any("the last 4 of its 12 dimensions" in el.value for el in at.markdown)
    _step(at, 3)
    titles = set(_titles(_step(at, 4)))
    assert {"Z, head 2's output · (tokens, d_value) = (5, 6)", "W_O · (heads·d_head, d_model) = (24, 32)"} <= titles


def test_gpt_oss_softmax_shows_the_heads_sink(tmp_path: Path) -> None:
    at = open_app_page(PAGE, text=TEXT, folder=str(build_gpt_oss(tmp_path / "gpt_oss")))
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(3).run()
    diff = _differences(at)
    assert diff["Q as attention read it"] < 1e-5 and diff["K as attention read it"] < 1e-5
    assert diff["head output Z = A V"] < 1e-5
    latex = [el.value for el in _step(at, 3).get("latex")]
    assert any(f"s = {SINKS[3]:.4g}" in formula and "e^{s}" in formula for formula in latex)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_text"])
def test_gated_attention_shows_each_heads_gate_and_holds_w_o(tmp_path: Path, model_type: str) -> None:
    at = open_app_page(PAGE, text=TEXT, folder=str(build_hybrid(model_type, tmp_path / model_type)))
    at.selectbox(key="head").set_value(1).run()
    diff = _differences(at)
    assert diff["Q as attention read it"] < 1e-5 and diff["head output Z = A V"] < 1e-5
    assert diff["Concat(heads) W_O + b_O"] < 1e-5 and diff["residual add"] < 1e-5
    assert "G, every head's output gate · (tokens, heads·d_head) = (5, 32)" in _titles(_step(at, 4))
    assert any(r"\odot G" in el.value for el in at.get("latex"))


def test_a_head_whose_recomputation_is_not_the_models_is_refused(monkeypatch) -> None:
    """Where a step recomputed from the weights is not the model's own (here: a softmax made wrong), the page says
    which and draws no steps."""
    monkeypatch.setattr(head_math, "softmax_rows", lambda scores: np.full(scores.shape, 0.5))
    at = open_app_page(PAGE, text=TEXT)
    assert not at.exception
    assert at.error[0].value == ("Step through cannot show this head: recomputed from the weights, pattern (softmax), "
                                 "head output Z = A V differ from the model's own values by more than 1% of their "
                                 "size, so its steps would not be the model's.")
    assert not at.success and not at.get("plotly_chart")
    assert list(at.table[0].value["held"]).count("no") == 2
