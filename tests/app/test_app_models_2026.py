"""The models of 2026 in the app: a hybrid's pages name its true layers ("layer 3 (attention layer 1)"), the Masks
page says where a GPT-OSS head's sink took the rest of each row, and every page and view opens on a tiny
DeepSeek-V3 (latent attention)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from tests.app.app_session import assert_ok, open_app_page, open_every_view
from tests.plotly_specs import chart_specs
from tests.tiny_hf import build_type
from tests.tiny_hybrids import build_hybrid
from tests.tiny_sinks import SINKS, build_gpt_oss

TEXT = "the cat sat on the mat"
TRUE = "layer 3 (attention layer 1)"  # the tiny hybrid's second attention layer (tests/tiny_hybrids.py)


def _on_layer_1(page: str, folder: Path, key: str, view: str) -> AppTest:
    at = open_app_page(page, folder=str(folder), text=TEXT)
    at.selectbox(key="layer").set_value(1).run()
    at.session_state[key] = view
    at.run()
    assert_ok(at, f"{page} · {view}")
    return at


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory) -> Path:
    return build_hybrid("lfm2", tmp_path_factory.mktemp("hybrid") / "lfm2")


@pytest.mark.parametrize("view", ["One head", "All heads of this layer"])
def test_the_attention_pages_titles_name_the_true_layer(hybrid, view: str) -> None:
    titles = [spec["layout"].get("title", {}).get("text", "") for spec in
              chart_specs(_on_layer_1("app_pages/attention.py", hybrid, "view", view))]
    assert any(TRUE in title for title in titles), titles
    assert not any("· layer 1 ·" in title or title.startswith("layer 1:") for title in titles), titles


@pytest.mark.parametrize(("view", "ticks"), [("Model view", ["1 (attention layer 0)", "3 (attention layer 1)"]),
                                             ("All heads of this layer", ["3 (attention layer 1)"])])
def test_the_thumbnail_grids_rows_are_the_true_layers(hybrid, view: str, ticks: list[str]) -> None:
    """The model view's rows, and the one row of the layer's heads (which said 0 for any layer)."""
    grid = next(spec for spec in chart_specs(_on_layer_1("app_pages/attention.py", hybrid, "view", view))
                if spec["data"][0]["type"] == "image")
    assert grid["layout"]["yaxis"]["ticktext"] == ticks
    assert grid["data"][1]["text"][-1] == f"layer {ticks[-1]}"  # the hover of the last thumbnail


def test_the_masks_pages_captions_name_the_true_layer(hybrid) -> None:
    at = _on_layer_1("app_pages/masks.py", hybrid, "masks_view", "Scores → probabilities")
    captions = [c.value for c in at.caption]
    assert any(c.startswith(f"{TRUE.capitalize()} · head ") for c in captions), captions
    assert any(f"All three: decoder self-attention (masked) · {TRUE} · head " in c for c in captions), captions


def test_the_generate_pages_step_names_the_true_layers(hybrid) -> None:
    at = open_app_page("app_pages/generate.py", folder=str(hybrid), text=TEXT)
    at.button(key="generate_step").click().run()
    at.selectbox(key="generate_layer").set_value(1).run()
    assert_ok(at, "a generated step")
    specs = chart_specs(at)
    layers = next(s for s in specs if "mean over heads" in s["layout"]["title"]["text"])
    assert list(layers["data"][0]["y"]) == ["layer 1 (attention layer 0)", TRUE]
    assert any(s["layout"]["title"]["text"].endswith(f"· {TRUE}, every head") for s in specs)


def test_the_masks_page_says_where_the_sink_took_the_rest(tmp_path) -> None:
    """GPT-OSS layer 1, head 3 (sink logit 2.5): the caption gives the logit and the sink's shares, which are what
    transformers' eager attention leaves off the tokens."""
    folder = build_gpt_oss(tmp_path / "gpt_oss")
    at = open_app_page("app_pages/masks.py", folder=str(folder), text=TEXT)
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(3).run()
    at.session_state["masks_view"] = "Scores → probabilities"
    at.run()
    assert_ok(at, "masks")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids = transformers.AutoTokenizer.from_pretrained(folder)(TEXT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        shares = 1 - model(input_ids=ids, output_attentions=True).attentions[1][0, 3].sum(-1).numpy()  # (tokens,)
    caption = next(c.value for c in at.caption if "learned sink" in c.value)
    assert f"with the logit {SINKS[3]:.3g} " in caption
    assert (f"It took {shares.mean():.1%} of a row on average (from {shares.min():.1%} to {shares.max():.1%})"
            in caption), caption
    assert np.all(shares > 0)


def test_every_page_and_view_opens_on_deepseek_v3(tmp_path) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(build_type("deepseek_v3", tmp_path / "v3")), text=TEXT)
    assert_ok(at, "overview")
    for page in ("app_pages/generate.py", "app_pages/ablation.py", "app_pages/attribution.py", "app_pages/tour.py"):
        at.switch_page(page).run()
        assert_ok(at, page)
    at.switch_page("app_pages/generate.py").run()
    at.button(key="generate_step").click().run()
    assert_ok(at, "a generated step")
    open_every_view(at)
