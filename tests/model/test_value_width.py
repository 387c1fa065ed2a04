"""Value heads narrower than the query heads (DeepSeek-V2/V3's multi-head latent attention: q/k heads 12 wide, value
heads 6): the models open through the Hugging Face path, their patterns are transformers' eager ones, and a summarised
run (each layer's output made from the probabilities the summary reads), its statistics, hook_z and the attention
output hold with the value's width (Step through and attribution on them: tests/model/test_step_through_2026.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hf import MLA, MLA_TYPES

TEXT = "the quick brown fox jumps over the lazy dog the cat sat on the mat"
HOOKS = ("*.hook_pattern", "*.attn.hook_z", "*.hook_attn_out", "*.hook_resid_post")


@pytest.fixture(params=["native", "torch ops"])
def kernel(request, monkeypatch) -> str:
    """The CPU's native kernel, or the torch ops a GPU runs (here on the CPU)."""
    if request.param == "torch ops":
        monkeypatch.setattr(native, "attention_rows", lambda: None)
    return request.param


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_patterns_are_transformers_eager_ones(mla_folders, model_type: str) -> None:
    runner = load_hf_runner(str(mla_folders[model_type]))
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    eager = type(runner.model).from_pretrained(mla_folders[model_type], attn_implementation="eager").eval()
    with torch.inference_mode():
        out = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True)
    assert len(out.attentions) == trace.n_layers("decoder.attn") == 2
    for layer, reference in enumerate(out.attentions):
        pattern = trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)
        np.testing.assert_allclose(pattern, reference[0].numpy(), atol=1e-5, err_msg=f"layer {layer}")
    probabilities = out.logits[0, -1].softmax(-1)
    top = trace.outputs["top_next_ids"]
    np.testing.assert_allclose(trace.outputs["top_next_probs"], probabilities[top].numpy(), atol=1e-5)


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_a_summarised_run_holds_with_the_values_width(mla_folders, model_type: str, kernel: str) -> None:
    """The summarised run (the layer's output made from the summary's probabilities, by the native kernel or the
    torch ops) gives the plain run's hook_z (heads, len, v_head_dim), attention outputs and prediction; its summary is
    the one the trace's patterns give; and z x W_O (o_proj) is the attention output."""
    runner = load_hf_runner(str(mla_folders[model_type]))
    plain = runner.run(TEXT, options=RunOptions(hooks=HOOKS))
    made = runner.run(TEXT, options=RunOptions(hooks=HOOKS, summarised=True))
    n = len(made.tokens)
    for name, value in plain.captured.items():
        if not name.endswith("hook_pattern"):
            np.testing.assert_allclose(made.captured[name], value, atol=1e-5, err_msg=name)
    assert made.output_text == plain.output_text
    np.testing.assert_allclose(made.outputs["top_next_probs"], plain.outputs["top_next_probs"], atol=1e-5)
    later = summarise_site(made, "decoder.attn")
    summary = made.summaries["decoder.attn"]
    np.testing.assert_allclose(summary.statistics, later.statistics, atol=1e-6)
    np.testing.assert_allclose(summary.thumbnails, later.thumbnails, atol=1e-6)
    for layer, block in enumerate(runner.model.model.layers):
        z = made.captured[f"decoder.{layer}.attn.hook_z"]
        assert z.shape == (4, n, MLA["v_head_dim"]) != made.pattern_source("decoder.attn", layer).query.shape
        with torch.no_grad():
            out = block.self_attn.o_proj(torch.from_numpy(z).transpose(0, 1).reshape(n, -1))
        np.testing.assert_allclose(out.numpy(), made.captured[f"decoder.{layer}.hook_attn_out"], atol=1e-5)
