"""Model-level faults held: a norm's weight and bias read back for any width, GPT-Neo's scores in float32 in any
dtype, and loaded models' weights frozen."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from torch import nn

from attention_atlas.model.core.attention import layer_inputs, native
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.norm_output import norm_affine
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import build, build_type

NEO_TEXT = "the quick brown fox jumps over the lazy dog the cat sat on the mat"


@pytest.mark.parametrize("width", [5, 7, 8])
def test_norm_affine_reads_a_layer_norms_weight_and_bias_for_any_width(width: int) -> None:
    torch.manual_seed(width)
    norm = nn.LayerNorm(width)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(width))
        norm.bias.copy_(torch.randn(width))
    gain, bias = norm_affine(norm)
    np.testing.assert_allclose(gain, norm.weight.detach().double().numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(bias, norm.bias.detach().double().numpy(), atol=1e-5, rtol=0)


@pytest.fixture
def gpu_products(monkeypatch) -> None:
    """What a GPU does with a bfloat16 model's summarised run, here on the CPU: the torch ops (the native kernel set
    aside) and the queries and keys kept in bfloat16 where attention read them in it (`kept_dtype` off the CPU)."""
    monkeypatch.setattr(native, "attention_rows", lambda: None)
    monkeypatch.setattr(layer_inputs, "kept_dtype", lambda dtype, device: dtype if dtype == torch.bfloat16
                        else torch.float32)


def test_gpt_neo_in_bfloat16_computes_its_unscaled_scores_in_float32_as_transformers_does(tmp_path, gpu_products
                                                                                           ) -> None:
    """GPT-Neo's scores are not scaled (a trained model's reach the hundreds; here q and k weights of std 0.5 make
    them about 20): transformers computes them in float32 for every dtype. A one-layer bfloat16 model's summarised
    run (the GPU's bfloat16 products) then gives its pattern (the thumbnail, the pattern itself for a short text)
    as eager's, to eager's own bfloat16 rounding of its probabilities, and the summary the trace's patterns give.
    Scores in bfloat16 were 0.04 off."""
    folder = build_type("gpt_neo", tmp_path / "neo", num_hidden_layers=1, attention_types=[[["global"], 1]])
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0, 0.5)
    model.save_pretrained(folder)
    runner = load_hf_runner(str(folder), precision=torch.bfloat16)
    trace = runner.run(NEO_TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    eager = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                              dtype=torch.bfloat16).eval()
    with torch.inference_mode():
        reference = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True).attentions[0][0].float()
    made = trace.summaries["decoder.attn"]
    assert made.thumbnails.shape == (1, *reference.shape)  # block means of one position: the pattern
    np.testing.assert_allclose(made.thumbnails[0], reference.numpy(), atol=2.5e-3)
    np.testing.assert_allclose(trace.pattern_source("decoder.attn", 0).pattern(dtype=np.float32), reference.numpy(),
                               atol=2.5e-3)
    later = summarise_site(trace, "decoder.attn")
    np.testing.assert_allclose(made.statistics, later.statistics, atol=1e-6)


@pytest.mark.parametrize("model_id", ["toy-copy", "toy-gpt-date", "minilm", "tiny-llama"])
def test_a_loaded_models_weights_need_no_gradient(tmp_path, model_id: str) -> None:
    """Every model the app loads is shared and never trained: no parameter asks for a gradient, so a gradient pass
    (attribution patching) builds no graph through the weights. The toy models, a packaged model and a Hugging Face
    folder."""
    source = str(build("llama", tmp_path / "llama")) if model_id == "tiny-llama" else model_id
    runner = load_runner(source)
    model = runner.model if hasattr(runner, "model") else runner.toy.model
    parameters = list(model.parameters())
    assert parameters and not any(parameter.requires_grad for parameter in parameters)
