"""Every page and every view of the app on a model of each layout the app reads beyond the core families (tiny
random models from tests/tiny_hf.py): norms around each sublayer with soft-capping and sliding windows (Gemma 2),
attention and MLP in parallel with fused projections and partial rotary (GPT-NeoX), norms after each sublayer with
query and key norms (OLMo 2), a mixture of experts (Mixtral), flattened positions and learned positions (OPT), a
DistilBERT encoder, a ModernBERT encoder (a bidirectional sliding window), a pre-norm encoder-decoder (mBART), and the
types that compute attention in their own code: GPT-Neo (unscaled, local layers), BLOOM (ALiBi) and Falcon; and
ALBERT (one layer's weights in every block, a factorised embedding), DeBERTa-v3 (disentangled attention) and CodeGen
(a sharded fused projection, whose queries and keys before rotation are not hooked)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from tests.app.app_session import LEAST_VIEWS, assert_ok, open_app_page, open_every_view
from tests.tiny_hf import build, build_type

LAYOUTS = ("gemma2", "gpt_neox", "olmo2", "mixtral", "opt", "distilbert", "mbart", "gemma3_text", "modernbert",
           "gpt_neo", "bloom", "falcon", "albert", "deberta-v2", "codegen")
PLAIN = ("app_pages/overview.py", "app_pages/generate.py", "app_pages/ablation.py")


PADDED = "llama with a padded vocabulary"  # its embedding 200 rows, its tokenizer 24 tokens: ids it cannot spell


@pytest.fixture(scope="module")
def type_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    folders = {model_type: build_type(model_type, root / model_type) for model_type in LAYOUTS}
    return folders | {PADDED: build("llama", root / "padded", vocab_size=200)}


@pytest.mark.parametrize("model_type", [*LAYOUTS, PADDED])
def test_every_page_and_view_opens(type_folders, model_type: str) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(type_folders[model_type]), text="the cat sat on the mat")
    for page in PLAIN:
        at.switch_page(page).run()
        assert_ok(at, page)
    at.switch_page("app_pages/generate.py").run()
    if "generate_step" in [button.key for button in at.button]:
        at.button(key="generate_step").click().run()
        assert_ok(at, "a generated step")
    open_every_view(at, LEAST_VIEWS)


def _titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def test_the_masks_page_draws_a_sliding_window_as_what_it_is(type_folders) -> None:
    """Gemma 3's layer 0 slides (3 tokens), layer 1 does not: the page says which, and draws layer 0's mask with
    the keys too far back hidden by the window, counted apart from the causal mask's."""
    at = open_app_page("app_pages/masks.py", folder=str(type_folders["gemma3_text"]), text="the cat sat on the mat")
    assert "**Sliding windows.** Layer 0: each token sees itself and the 2 tokens before it; the other layers see " \
        "every token." in " ".join(m.value for m in at.markdown)
    assert "mask · decoder self-attention · layer 0 (a window of 3)" in _titles(at)
    counts = [c.value for c in at.caption if "hidden (" in c.value]
    n = 7  # <s> and six words
    assert f"{(n - 3) * (n - 2) // 2} window" in counts[-1] and f"{n * (n - 1) // 2} causal" in counts[-1]


def test_step_through_adds_alibi_and_debertas_position_terms_and_says_albert_s_weights_are_shared(type_folders) -> None:
    """BLOOM's scores carry ALiBi and DeBERTa's its content-to-position and position-to-content terms, named in the
    formula, and the head recomputed with them matches the model's; on ALBERT the page says the weights it reads are
    the ones every block applies."""
    scores = {"step_view": "3 · Scores → pattern"}  # the tab with the formula
    at = open_app_page("app_pages/step_through.py", folder=str(type_folders["bloom"]), text="the cat sat on the mat",
                       params=scores)
    assert_ok(at, "BLOOM")
    assert any(r"B_{\text{ALiBi}}" in formula.value for formula in at.latex)
    head_output = float(at.success[0].value.split("the head's output to ")[1].split(" ")[0])
    assert head_output < 1e-5
    at = open_app_page("app_pages/step_through.py", folder=str(type_folders["deberta-v2"]),
                       text="the cat sat on the mat", params=scores)
    assert_ok(at, "DeBERTa")
    assert any(r"B_{\text{c2p + p2c}}" in formula.value for formula in at.latex)
    assert float(at.success[0].value.split("the head's output to ")[1].split(" ")[0]) < 1e-5
    titles = " ".join(json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart"))
    assert "content → content" in titles and "content → position" in titles and "position → content" in titles
    terms_sum = next(c.value for c in at.caption if c.value.startswith("Their sum against the model's scores"))
    assert float(terms_sum.rsplit(" ", 1)[1].rstrip(".")) < 1e-5  # c2c + c2p + p2c, each by its code, is S
    at = open_app_page("app_pages/step_through.py", folder=str(type_folders["albert"]), text="the cat sat on the mat")
    assert_ok(at, "ALBERT")
    assert "Weights: one layer's weights, applied by every one of its 3 blocks" in " ".join(c.value for c in at.caption)


def test_the_masks_page_draws_bloom_s_alibi_apart_from_the_content_scores(type_folders) -> None:
    """Scores → probabilities on BLOOM: the bias drawn is head 1's ALiBi, its slope x (key - query) (the slopes of
    transformers' BLOOM), hatched where the causal mask hides the key, and the scores without it plus it are the
    scores the model computed."""
    at = open_app_page("app_pages/masks.py", folder=str(type_folders["bloom"]), text="the cat sat on the mat")
    at.selectbox(key="head").set_value(1).run()
    at.session_state["masks_view"] = "Scores → probabilities"
    at.run()
    assert_ok(at, "BLOOM masks")
    figures = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
               for c in at.get("plotly_chart")}
    bias, content, scores = (_z(figures[title]) for title in ("B (ALiBi)", "QKᵀ/√d_k (without the bias)",
                                                               "scores QKᵀ/√d_k"))
    n = len(bias)
    slope = float(transformers.models.bloom.modeling_bloom._get_alibi_slopes(4, torch.device("cpu"))[1])
    visible = np.tril(np.ones((n, n), dtype=bool))  # the causal mask: keys ahead are hatched, not coloured
    assert (np.isnan(bias) == ~visible).all()
    expected = slope * np.subtract.outer(np.arange(n), np.arange(n)).T  # slope x (key - query)
    np.testing.assert_allclose(bias[visible], expected[visible], atol=1e-6)
    np.testing.assert_allclose((content + bias)[visible], scores[visible], atol=1e-5)
    assert "ALiBi's is this head's slope × (key − query)" in " ".join(c.value for c in at.caption)


def _z(spec: dict) -> np.ndarray:
    """A heatmap's z as plotly receives it (base64 typed array, or nested lists)."""
    z = spec["data"][0]["z"]
    if isinstance(z, dict):
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(
            [int(n) for n in z["shape"].split(",")]).astype(np.float64)
    return np.array(z, dtype=np.float64)
