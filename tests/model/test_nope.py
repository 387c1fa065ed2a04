"""Llama 4's layers without rotary positions (NoPE), its temperature tuning and qk-norm, named where the app says what
a model does with positions: its rotary tables (a complex e^{iθ} table, pairs 2i and 2i + 1) rotate q as the model
does, the Positional encoding page's scheme names the NoPE layers, and the model card says both; Step through
recomputes each head with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.models.llama4.modeling_llama4 import apply_rotary_emb

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_math import compute_head
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.positions import position_scheme
from attention_atlas.model.inspect.rotary import rotary_tables, rotate
from attention_atlas.model.inspect.step_hooks import step_names
from tests.tiny_hf import build
from tests.tiny_llama4 import VARIANTS, build_llama4

TEXT = "the quick brown fox jumps over the lazy dog"
NOPE = ("layer 1: q and k are not rotated, so their scores carry no position and order reaches them only through the "
        "causal mask")
TUNED = ("; its queries are multiplied by 1 + 0.5·ln(1 + ⌊(p + 1) / 2⌋) at position p (temperature tuning: 1 up to "
         "position 0, then growing slowly, so far tokens' scores stay sharp)")


@pytest.fixture(scope="module")
def runners(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("nope")
    return {name: load_hf_runner(str(build_llama4(root / name, **VARIANTS[name]))) for name in ("plain", "both")}


def test_the_rotary_tables_of_a_complex_rotation_rotate_as_the_model(runners) -> None:
    model = runners["plain"].model
    length, d_head = 7, model.config.head_dim
    x = torch.randn(1, length, 4, d_head)  # (batch, len, heads, d_head), as Llama 4 rotates it
    with torch.inference_mode():
        turns = model.model.rotary_emb(x, torch.arange(length)[None])  # (1, len, d_head / 2) complex
        rotated, _ = apply_rotary_emb(x, x, turns)
    cos, sin, interleaved = rotary_tables(model, length)  # (len, d_head) each
    assert interleaved and cos.shape == (length, d_head)
    for head in range(4):
        torch.testing.assert_close(rotate(x[0, :, head].double(), cos, sin, interleaved).float(), rotated[0, :, head])


@pytest.mark.parametrize("variant", ["plain", "both"])
def test_the_positional_page_and_the_card_name_the_nope_layers(runners, variant: str) -> None:
    runner = runners[variant]
    scheme = position_scheme(runner, "decoder", 10)
    words = NOPE + (TUNED if variant == "both" else "")
    assert scheme.kind == "rotary" and scheme.nope == words and "In every rotary layer" in scheme.about
    assert scheme.rotary_base == runner.model.config.rope_parameters["rope_theta"]
    notes = runner.facts.notes
    assert notes["no positional encoding (NoPE)"] == words
    assert ("qk-norm" in notes) == (variant == "both")


def test_a_model_that_rotates_every_layer_has_no_nope(tmp_path: Path) -> None:
    runner = load_hf_runner(str(build("llama", tmp_path / "llama")))
    scheme = position_scheme(runner, "decoder", 10)
    assert scheme.nope == "" and "In every layer" in scheme.about
    assert "no positional encoding (NoPE)" not in runner.facts.notes and "qk-norm" not in runner.facts.notes


@pytest.fixture(scope="module")
def every_variant(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("variants")
    return {name: load_hf_runner(str(build_llama4(root / name, **settings))) for name, settings in VARIANTS.items()}


@pytest.mark.parametrize("variant", VARIANTS)
def test_step_through_recomputes_every_head_as_the_model(every_variant, variant: str) -> None:
    """Step through's recomputation from the weights (no rotation in the NoPE layer, qk-norm after the rotation, the
    NoPE queries' temperature) gives the model's scores, what attention read (where hooked) and each head's output."""
    runner = every_variant[variant]
    for layer in (0, 1):
        names = step_names(runner.facts, "decoder.attn", layer)
        trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
        c, prefix = trace.captured, names.attention
        x = block_input(runner, names.x, c[names.x])
        source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(layer)]  # the layer's mask and scale
        for head in range(runner.facts.n_heads):
            weights = head_weights(runner, "decoder.attn", layer, head, len(x), len(x), source)
            assert (weights.rotary is None) == (layer == 1)  # layer 1 is NoPE
            assert (weights.l2_eps is not None) == (layer == 0 and VARIANTS[variant]["use_qk_norm"])
            assert (weights.query_scale is not None) == (layer == 1 and VARIANTS[variant]["attn_temperature_tuning"])
            steps = compute_head(weights, x, x, np.asarray(source.allowed))
            np.testing.assert_allclose(steps.scores, c[f"{prefix}.hook_attn_scores"][head], atol=2e-6)
            np.testing.assert_allclose(steps.z, c[f"{prefix}.hook_z"][head], atol=1e-6)
            if f"{prefix}.hook_rot_q" in c:
                np.testing.assert_allclose(steps.rot_q, c[f"{prefix}.hook_rot_q"][head], atol=1e-5)
                np.testing.assert_allclose(steps.rot_k, c[f"{prefix}.hook_rot_k"][weights.kv_head], atol=1e-5)
