"""The Activations page's Implicit attention view: a Mamba-2 layer's scan drawn as its matrix, the numbers the
model's own layer used (model/hf/ssd.py), and a model without Mamba-2 layers saying so."""

from __future__ import annotations

import numpy as np

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.ssd import implicit_attention
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
from tests.tiny_hybrids import build_lively_mamba2

TEXT = "the quick brown fox jumps over the lazy dog"


def test_a_mamba_2_layers_matrix_is_drawn_as_the_layer_used_it(tmp_path) -> None:
    folder = build_lively_mamba2("granitemoehybrid", tmp_path / "granite")
    at = open_app_page("app_pages/activations.py", folder=str(folder), text=TEXT,
                       params={"activations_view": "Implicit attention", "activations_ssd_layer": "2",
                               "activations_ssd_head": "1"})
    assert_ok(at, "implicit attention")
    runner = load_hf_runner(str(folder))
    expected = implicit_attention(runner.model, runner.text.encode(TEXT), 2).matrix[1]
    z = plotly_array(chart(at, "layer 2 · head 1: implicit attention M")["data"][0]["z"])
    np.testing.assert_allclose(np.nan_to_num(z), np.tril(expected), atol=1e-6)  # above the diagonal: hatched
    assert any("Held to the model" in c.value and "Not a softmax" in c.value for c in at.caption)
    assert at.selectbox(key="activations_ssd_layer").options == ["layer 0 (Mamba (state space))",
                                                                 "layer 2 (Mamba (state space))"]


def test_a_model_without_mamba_2_layers_says_so() -> None:
    at = open_app_page("app_pages/activations.py", "toy-gpt-date", "14 feb 1999",
                       params={"activations_view": "Implicit attention"})
    assert_ok(at, "no state space")
    assert any("has no Mamba-2 layer" in info.value for info in at.info)
