"""Falcon-H1 scales what its attention reads and its keys (µP multipliers, each ≠ 1 in its released configs): the block
hands attention its first norm's output × attention_in_multiplier, and the attention multiplies its keys by
key_multiplier after their projection, before the rotation. Its card is still pre-norm with its ln1 hooks (the norm
read as the one whose output, scaled, is attention's input; before, the scale hid it and the block read as
post-norm), and Step through's recomputation of every head holds every step it shows to the model's own values (the
keys it reads, the scores; before, the key multiplier was left out). The references are transformers' own: its
hidden states, and what q_proj and the attention function received."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_math import compute_head
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.offered import offered_hooks
from attention_atlas.model.inspect.step_hooks import step_checks, step_names
from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer
from tests.tiny_hybrids import HYBRID_TYPES

TEXT = "the quick brown fox jumps over the lazy dog"
MULTIPLIED = {"attention_in_multiplier": 0.5, "key_multiplier": 0.7, "attention_out_multiplier": 0.9,
              "ssm_out_multiplier": 0.6, "embedding_multiplier": 4.0, "lm_head_multiplier": 0.25,
              "mlp_multipliers": [0.9, 0.6]}  # each ≠ 1, as in Falcon-H1's released configs


def build_multiplied_falcon_h1(folder: Path, **multipliers: object) -> Path:
    """Save a tiny random Falcon-H1 (tests/tiny_hybrids.py's) with `multipliers` (default MULTIPLIED) into `folder`."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    settings = SHARED | HYBRID_TYPES["falcon_h1"] | (multipliers or MULTIPLIED)
    config = transformers.AutoConfig.for_model("falcon_h1", vocab_size=vocab, **settings)
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_multiplied_falcon_h1(tmp_path_factory.mktemp("falcon-h1") / "falcon_h1")


@pytest.fixture(scope="module")
def runner(folder):
    return load_hf_runner(str(folder))


def test_the_card_is_pre_norm_with_its_first_norms(runner) -> None:
    assert runner.facts.norm == "pre-norm (RMSNorm)"
    assert not {"ln1.hook_scale", "ln1.hook_normalized"} & set(runner.family.unplaced)
    assert runner.facts.notes["scaled inputs"] == ("attention reads its norm's output × 0.5 (attention_in_multiplier)"
                                                   "; its keys are multiplied by 0.7 after their projection "
                                                   "(key_multiplier)")


def test_ln1_reads_the_block_and_its_output_scaled_is_what_attention_reads(runner, folder) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    read = []  # what each layer's q_proj received: (1, pos, d_model)
    hooks = [layer.self_attn.q_proj.register_forward_hook(lambda m, args, out: read.append(args[0][0].numpy()))
             for layer in model.model.layers]
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.*.ln1.*", "decoder.blocks.*")))
    with torch.inference_mode():
        hidden = model(input_ids=torch.tensor([trace.ids]), output_hidden_states=True, use_cache=False).hidden_states
    for hook in hooks:
        hook.remove()
    for layer in range(2):
        x = hidden[layer][0].numpy().astype(np.float64)
        rms = np.sqrt((x**2).mean(-1, keepdims=True) + runner.model.config.rms_norm_eps)
        np.testing.assert_allclose(trace.captured[f"decoder.{layer}.ln1.hook_scale"], rms, rtol=1e-5)
        normed = block_input(runner, f"decoder.{layer}.ln1.hook_normalized",
                             trace.captured[f"decoder.{layer}.ln1.hook_normalized"])
        np.testing.assert_allclose(normed * MULTIPLIED["attention_in_multiplier"], read[layer], atol=1e-5)


def test_every_step_through_step_is_the_models_own(runner) -> None:
    """Every head of every layer: Q, K, V, what attention read, the scores, the pattern and Z recomputed from the
    weights and ln1's output equal the model's own hooks (where Step through held K as attention read it and the
    scores off by the key multiplier)."""
    offered = offered_hooks(runner)
    for layer in range(2):
        names = step_names(runner.facts, "decoder.attn", layer, offered)
        trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
        x = block_input(runner, names.x, trace.captured[names.x])
        source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(layer)]
        for head in range(runner.facts.n_heads):
            weights = head_weights(runner, "decoder.attn", layer, head, len(x), len(x), source)
            steps = compute_head(weights, x, x, np.asarray(source.allowed))
            checked = step_checks(trace, names, "decoder.attn", layer, weights, steps, x, x)
            assert [step for step, *_ in checked] == [
                "Q (before any rotation)", "K", "V", "Q as attention read it", "K as attention read it",
                "scores before the mask", "pattern (softmax)", "head output Z = A V"]
            for step, mine, theirs, _ in checked:
                np.testing.assert_allclose(mine, theirs, atol=2e-4 if step.startswith("pattern") else 1e-5,
                                           err_msg=f"layer {layer} head {head}: {step}")


def test_without_the_key_multiplier_the_keys_read_are_not_the_models(runner) -> None:
    """The check above can fail: the keys as read, recomputed with the multiplier left out, differ from the model's."""
    names = step_names(runner.facts, "decoder.attn", 0, offered_hooks(runner))
    trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
    x = block_input(runner, names.x, trace.captured[names.x])
    source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(0)]
    weights = head_weights(runner, "decoder.attn", 0, 0, len(x), len(x), source)
    assert weights.key_scale == MULTIPLIED["key_multiplier"]
    left_out = compute_head(weights.__class__(**(vars(weights) | {"key_scale": 1.0})), x, x,
                            np.asarray(source.allowed))
    assert np.abs(left_out.rot_k - trace.captured[f"{names.attention}.hook_rot_k"][0]).max() > 1e-2
