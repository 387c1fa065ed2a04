"""MPT (attention in its own code, with ALiBi) routed through the app's attention: its patterns are transformers' eager
ones, plain and summarised; the bias the app adds and draws is each head's slope x (key - query), the slopes MPT's
1/2^(8 (h + 1) / heads); it generates what transformers generates; it reads no more than max_seq_len tokens; a
config with its own softmax_scale and clip_qkv opens too, its heads' weights refused with a sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.families import adapter_of
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.positions import position_scheme
from tests.tiny_hf import WORDS, build_type

TEXT = "the quick brown fox jumps over the lazy dog"
SLOPES = 2.0 ** -(8 * np.arange(1, 5) / 4)  # (heads,) MPT's ALiBi slopes for 4 heads: 1/4, 1/16, 1/64, 1/256


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_type("mpt", tmp_path_factory.mktemp("mpt") / "mpt")


@pytest.fixture(scope="module")
def runner(folder):
    return load_hf_runner(str(folder))


def _eager(folder: Path, ids: list[int]):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        return model, model(input_ids=torch.tensor([ids]), output_attentions=True)


@pytest.mark.parametrize("summarised", [False, True])
def test_patterns_and_prediction_are_transformers_eager_ones(folder, runner, summarised: bool) -> None:
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=summarised))
    _, out = _eager(folder, trace.ids)
    assert len(out.attentions) == trace.n_layers("decoder.attn") == 2
    for layer, reference in enumerate(out.attentions):
        pattern = trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)
        np.testing.assert_allclose(pattern, reference[0].numpy(), atol=1e-5, err_msg=f"layer {layer}")
    top = trace.outputs["top_next_ids"]
    np.testing.assert_allclose(trace.outputs["top_next_probs"], out.logits[0, -1].softmax(-1)[top].numpy(), atol=1e-5)


def test_the_bias_added_and_drawn_is_each_heads_slope_times_the_distance(runner) -> None:
    """The scores the app records are Q K^T x scale + slope x (key - query) (what the Masks page splits), and the
    Positional encoding page draws that bias per head and distance."""
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.attn.hook_q", "*.attn.hook_k", "*.hook_attn_scores")))
    n = len(trace.ids)
    distance = np.arange(n)[None] - np.arange(n)[:, None]  # key - query
    for layer in (0, 1):
        q, k = (trace.captured[f"decoder.{layer}.attn.hook_{x}"] for x in "qk")  # (heads, n, d_head)
        content = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        bias = trace.captured[f"decoder.{layer}.attn.hook_attn_scores"] - content
        np.testing.assert_allclose(bias, SLOPES[:, None, None] * distance, atol=1e-5)
    scheme = position_scheme(runner, "decoder", 6)
    assert scheme.kind == "relative" and "ALiBi" in scheme.about and "MPT" in scheme.source
    np.testing.assert_allclose(scheme.bias, SLOPES[:, None] * np.arange(-5, 6)[None], rtol=1e-6)


def test_it_generates_what_transformers_generates(folder, runner) -> None:
    """The run's continuation (generate, handed the run's KV cache: MPT's config turns the cache off) is
    transformers' own greedy continuation."""
    trace = runner.run(TEXT)
    model, _ = _eager(folder, trace.ids)
    expected = model.generate(torch.tensor([trace.ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert trace.output_kind == "generated"
    assert trace.output_text == runner.text.decode(expected[0, len(trace.ids):].tolist())


def test_it_reads_no_more_than_max_seq_len_tokens(runner) -> None:
    """Its ALiBi covers max_seq_len (64) keys: the card says so, and a longer text is refused with a sentence."""
    assert (runner.facts.max_len, runner.facts.positional, runner.facts.n_kv_heads) == (64, "ALiBi", 4)
    assert runner.facts.d_ff == 4 * 32  # transformers' MPT MLP, whatever expansion_ratio says
    with pytest.raises(UserError, match="at most 64"):
        runner.run(" ".join(WORDS * 4))


def test_its_own_scale_and_clamped_projections_are_eager_ones(tmp_path) -> None:
    """softmax_scale 0.5 and clip_qkv 0.05 (which clamps most of a random model's projections): the patterns are
    still eager's, the scale is named, and the heads' weights (no longer one matrix a head) refused with a sentence."""
    folder = build_type("mpt", tmp_path / "mpt", attn_config={"alibi": True, "softmax_scale": 0.5, "clip_qkv": 0.05})
    runner = load_hf_runner(str(folder))
    trace = runner.run(TEXT)
    _, out = _eager(folder, trace.ids)
    for layer, reference in enumerate(out.attentions):
        np.testing.assert_allclose(trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32),
                                   reference[0].numpy(), atol=1e-5)
    attention = runner.model.transformer.blocks[0].attn
    assert adapter_of("mpt").scale(attention, 8, 0) == (0.5, "0.5 (the model's softmax_scale)")
    with pytest.raises(UserError, match="clip_qkv"):
        head_weights(runner, "decoder.attn", 0, 0, len(trace.ids), len(trace.ids))
