"""Step through on the attention of 2026's models: DeepSeek-V2/V3's multi-head latent attention recomputed from its
weights (the queries' latent and norm, the keys' and values' latent, its norm and the shared rotary key part, V3's
rotary pairs laid out after the rotation) equals every hook the model recorded, and direct logit attribution (which
reads each head's z and o_proj only) runs on it; GPT-OSS's rotation (one cos a pair (i, i + d/2), YaRN's scaling in
the tables) is the model's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import attribute, attribution_options
from attention_atlas.model.inspect.head_math import compute_head, output_projection
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.step_hooks import step_names
from tests.tiny_hf import MLA, MLA_TYPES
from tests.tiny_hybrids import build_hybrid
from tests.tiny_sinks import build_gpt_oss

TEXT = "the quick brown fox jumps over the lazy dog the cat sat on the mat"


def _recomputed(runner, layer: int, head: int, **changes):
    """(steps, weights, trace, names) of `head` at `layer` on TEXT, the weights changed by `changes`."""
    names = step_names(runner.facts, "decoder.attn", layer)
    trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
    x = block_input(runner, names.x, trace.captured[names.x])
    source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(layer)]
    weights = head_weights(runner, "decoder.attn", layer, head, len(x), len(x), source)
    if changes:
        weights = replace(weights, latent=replace(weights.latent, **changes))
    return compute_head(weights, x, x, np.asarray(source.allowed)), weights, trace, names


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_each_latent_head_recomputed_from_its_weights_is_the_models(mla_runners, model_type: str) -> None:
    runner = mla_runners[model_type]
    for layer in range(2):
        for head in range(4):
            steps, weights, trace, names = _recomputed(runner, layer, head)
            c = trace.captured
            width = MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"]
            assert steps.q.shape == steps.k.shape == (len(trace.tokens), width)
            assert steps.v.shape[1] == steps.z.shape[1] == weights.d_value == MLA["v_head_dim"]
            assert steps.c_kv.shape[1] == MLA["kv_lora_rank"]
            assert (steps.c_q is None) == (model_type == "deepseek_v2")  # V2's q_proj reads X itself
            for mine, hook, index in ((steps.rot_q, "hook_rot_q", head), (steps.rot_k, "hook_rot_k", head),
                                      (steps.v, "hook_v", head), (steps.scores, "hook_attn_scores", head),
                                      (steps.z, "hook_z", head)):
                np.testing.assert_allclose(mine, c[f"{names.attention}.{hook}"][index], atol=1e-5,
                                           err_msg=f"{model_type} layer {layer} head {head} {hook}")
            np.testing.assert_allclose(steps.pattern, trace.head_pattern("decoder.attn", layer, head), atol=1e-3)
            np.testing.assert_allclose(output_projection(c[f"{names.attention}.hook_z"], weights), c[names.out],
                                       atol=1e-5)


def test_v3s_rotary_pairs_are_laid_out_after_the_rotation(mla_runners) -> None:
    """V3 (rope_interleave) rotates pairs (2i, 2i + 1) and lays them out [evens | odds]: without that the keys read
    differ from the model's (so the check above can fail)."""
    steps, _, trace, names = _recomputed(mla_runners["deepseek_v3"], 1, 0, deinterleaved=False)
    assert np.abs(steps.rot_k - trace.captured[f"{names.attention}.hook_rot_k"][0]).max() > 1e-3


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_direct_logit_attribution_reads_each_heads_z_and_o_proj(mla_runners, model_type: str) -> None:
    runner = mla_runners[model_type]
    trace = runner.run(TEXT, options=attribution_options(runner))
    found = attribute(runner, trace, " fox")  # raises where its parts do not add up to the model's own logit
    assert found.heads.shape == (2, 4) and np.abs(found.heads).max() > 0
    assert found.total == pytest.approx(found.model_logit, abs=1e-3)


def test_gpt_oss_queries_and_keys_are_rotated_as_the_model_rotates_them(tmp_path) -> None:
    """GPT-OSS's rotary module gives one cos and sin a pair of dimensions (i, i + d/2) (as GPT-J does for its pairs
    (2i, 2i + 1)), times YaRN's attention scaling: Step through rotates as the model's own attention read them."""
    runner = load_hf_runner(str(build_gpt_oss(tmp_path / "gpt_oss")))
    assert runner.model.config.rope_parameters["rope_type"] == "yarn"
    names = step_names(runner.facts, "decoder.attn", 1)
    trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
    x = block_input(runner, names.x, trace.captured[names.x])
    source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(1)]
    for head in range(runner.facts.n_heads):
        weights = head_weights(runner, "decoder.attn", 1, head, len(x), len(x), source)
        steps = compute_head(weights, x, x, np.asarray(source.allowed))
        for mine, hook in ((steps.rot_q, "hook_rot_q"), (steps.rot_k, "hook_rot_k")):
            np.testing.assert_allclose(mine, trace.captured[f"{names.attention}.{hook}"][weights.kv_head if hook
                                       == "hook_rot_k" else head], atol=1e-5, err_msg=f"head {head} {hook}")
        np.testing.assert_allclose(steps.pattern, trace.head_pattern("decoder.attn", 1, head), atol=1e-3)
        np.testing.assert_allclose(steps.z, trace.captured[f"{names.attention}.hook_z"][head], atol=1e-5)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_text"])
def test_gated_attention_heads_and_their_gates_are_the_models(tmp_path, model_type: str) -> None:
    """Qwen3-Next and Qwen3.5 make each head's query and a gate of the same width in one projection ([query | gate] a
    head): the query is the head's half, and the layer's output is Concat(Z ⊙ sigmoid(X W_G + b_G)) W_O."""
    runner = load_hf_runner(str(build_hybrid(model_type, tmp_path / model_type)))
    for layer in range(runner.run(TEXT).n_layers("decoder.attn")):
        names = step_names(runner.facts, "decoder.attn", layer)
        trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
        x = block_input(runner, names.x, trace.captured[names.x])
        source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(layer)]
        for head in range(runner.facts.n_heads):
            weights = head_weights(runner, "decoder.attn", layer, head, len(x), len(x), source)
            steps = compute_head(weights, x, x, np.asarray(source.allowed))
            assert weights.gate is not None and weights.gate[0].shape == (x.shape[1], weights.n_heads * weights.d_head)
            for mine, hook, index in ((steps.rot_q, "hook_rot_q", head), (steps.rot_k, "hook_rot_k", weights.kv_head),
                                      (steps.z, "hook_z", head)):
                np.testing.assert_allclose(mine, trace.captured[f"{names.attention}.{hook}"][index], atol=1e-5)
        z_all = trace.captured[f"{names.attention}.hook_z"]
        np.testing.assert_allclose(output_projection(z_all, weights, x), trace.captured[names.out], atol=1e-5)
        ungated = replace(weights, gate=None)  # the gate changes what the layer writes: the check can fail
        assert np.abs(output_projection(z_all, ungated) - trace.captured[names.out]).max() > 1e-3
