"""DeepSeek-V2/V3's multi-head latent attention on the model card and in the memory estimate: query and key heads
qk_nope_head_dim + qk_rope_head_dim wide (12 in the tiny models), value heads v_head_dim (6), not hidden_size / heads
(8) nor the config's head_dim (its rotated part, 4). The estimate of what a run keeps (model/hf/facts.py source_bytes)
is what a run of the tiny models keeps."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.facts import source_bytes
from attention_atlas.model.hf.families import adapter_of
from tests.tiny_hf import MLA, MLA_TYPES

TEXT = "the quick brown fox jumps over the lazy dog the cat sat on the mat"
QUERIES = {"deepseek_v2": "", "deepseek_v3": ", queries from one of 16"}  # V2 projects its queries directly


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_the_sizes_are_the_heads_true_widths(mla_runners, model_type: str) -> None:
    sizes = adapter_of(model_type).sizes(mla_runners[model_type].model.config, "decoder")
    assert sizes.d_head == MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"] == 12
    assert sizes.value_width == MLA["v_head_dim"] == 6


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_the_card_says_the_widths_and_where_keys_and_values_come_from(mla_runners, model_type: str) -> None:
    notes = mla_runners[model_type].facts.notes
    assert notes["multi-head latent attention"] == (
        "each head's queries and keys are 12 numbers, 4 of them rotated (the rest carry no position), its values 6; "
        f"keys and values are made from one latent of 16 numbers a token{QUERIES[model_type]}")


@pytest.mark.parametrize("model_type", MLA_TYPES)
def test_the_estimate_is_what_a_run_keeps(mla_runners, model_type: str) -> None:
    """source_bytes(L) = the queries and keys every layer keeps (O(L)) + the mask (L x L bools at most): the first
    part equals the bytes of the queries and keys a run of L tokens keeps."""
    runner = mla_runners[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",)))
    n = len(trace.ids)
    kept = sum(np.asarray(part).nbytes for layer in range(trace.n_layers("decoder.attn"))
               for part in (trace.pattern_source("decoder.attn", layer).query,
                            trace.pattern_source("decoder.attn", layer).key))
    assert source_bytes(runner.model.config, runner.family, n) - n * n == kept
    assert kept == 2 * n * 4 * (12 + 12) * 4  # layers x tokens x (query and key heads x 12) x float32
