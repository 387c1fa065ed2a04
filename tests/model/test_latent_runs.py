"""DeepSeek-V2 and V3 (multi-head latent attention: value heads narrower than query and key heads) generate, ablate
and patch as every model does: generation with a cache is the one without, an ablated head is its share of o_proj's
input zeroed, and patching restores what it patches."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.patching import patch
from tests.tiny_hf import MLA_TYPES, log_probs_with_columns_zeroed

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_generation_with_a_cache_is_the_one_without(mla_runners, model_type: str) -> None:
    runner = mla_runners[model_type]
    greedy = lambda logits, step: int(logits.argmax())  # noqa: E731
    cached = list(generate(runner.stepper(TEXT, RunOptions()), [], 5, greedy))
    full = list(generate(runner.stepper(TEXT, RunOptions(), use_cache=False), [], 5, greedy))
    assert cached and [s.token_id for s in cached] == [s.token_id for s in full]
    for a, b in zip(cached, full, strict=True):
        np.testing.assert_allclose(a.self_rows, b.self_rows, atol=1e-5)


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_an_ablated_head_is_its_values_width_of_o_proj_input_zeroed(mla_runners, model_type: str) -> None:
    """Head 1 of layer 1: its v_head_dim (6) columns of o_proj's input, not a query head's width (12)."""
    runner = mla_runners[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=()))
    outcome = runner.ablation_outcomes(trace, [(), (("decoder.1.attn", 1),)], "zero")
    width = runner.model.config.v_head_dim
    projection = runner.model.model.layers[1].self_attn.o_proj  # input (1, len, heads * v_head_dim)
    zeroed = log_probs_with_columns_zeroed(runner.model, projection, trace.ids, slice(width, 2 * width))
    np.testing.assert_allclose(outcome.values[1, -1], zeroed[-1], atol=1e-5)
    assert not np.allclose(outcome.values[0, -1], outcome.values[1, -1], atol=1e-7)


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_patching_restores_the_stream_it_patches(mla_runners, model_type: str) -> None:
    """The texts differ in their last token only: its stream patched into any layer's input is the clean run."""
    found = patch(mla_runners[model_type], "the quick brown fox", "the quick brown dog", " fox", " dog")
    assert found.complete and found.results["head_out"].shape == (2, 4)
    np.testing.assert_allclose(found.normalised("resid_pre")[:, -1], [1.0, 1.0], atol=1e-4)
