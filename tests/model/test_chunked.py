"""Llama 4 (`llama4_text`): a chunked-attention layer (each query sees only its own chunk of attention_chunk_size
positions, causally) and a NoPE layer (no rotary; temperature tuning scales its queries by position; qk-norm
L2-normalises the rotary layers' q and k). The app's attention is transformers' eager one, plain and summarised, and
it generates what transformers' `generate` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.chunks import chunked
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.runner import CONTINUATION_TOKENS
from attention_atlas.plot.masking import SiteMask
from tests.tiny_llama4 import CHUNK, VARIANTS, build_llama4

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llama4")
    return {name: build_llama4(root / name, **settings) for name, settings in VARIANTS.items()}


def test_the_chunk_mask_hides_the_keys_of_other_chunks() -> None:
    mask = torch.zeros(1, 1, 7, 7).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
    seen = chunked(mask, CHUNK, 7, 7, mask.device)[0, 0] == 0  # (7, 7)
    expected = [[k <= q and k // CHUNK == q // CHUNK for k in range(7)] for q in range(7)]
    assert seen.tolist() == expected
    assert chunked(mask, CHUNK, 7, 7, mask.device) is chunked(mask, CHUNK, 7, 7, mask.device)
    step = mask[..., -1:, :]  # a cached step's row: transformers' own mask, which knows where the cache starts
    assert chunked(step, CHUNK, 1, 7, mask.device) is step


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("summarised", [False, True])
def test_patterns_and_next_token_are_transformers_eager_ones(folders, variant: str, summarised: bool) -> None:
    """Loaded through the guard (which would refuse it otherwise); every layer's pattern is eager's, the chunked
    layer's zero outside each query's chunk; the next-token probabilities are eager's."""
    runner = load_hf_runner(str(folders[variant]))
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=summarised))
    eager = type(runner.model).from_pretrained(folders[variant], attn_implementation="eager").eval()
    with torch.inference_mode():
        out = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True)
    assert len(out.attentions) == trace.n_layers("decoder.attn") == 2
    for layer, reference in enumerate(out.attentions):
        pattern = trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)
        np.testing.assert_allclose(pattern, reference[0].numpy(), atol=1e-5, err_msg=f"layer {layer}")
    positions = np.arange(len(trace.ids))
    apart = positions[:, None] // CHUNK != positions[None] // CHUNK
    chunked_layer = trace.pattern_source("decoder.attn", 0).pattern(dtype=np.float32)
    assert (chunked_layer[:, apart] == 0).all() and apart.any()
    probabilities = out.logits[0, -1].softmax(-1)
    np.testing.assert_allclose(trace.outputs["top_next_probs"], probabilities[trace.outputs["top_next_ids"]].numpy(),
                               atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_it_generates_what_transformers_generates(folders, variant: str) -> None:
    """The run's greedy continuation (its KV cache reused by `generate`, a chunked layer's cache keeping only its last
    keys) is eager transformers' own greedy generation; the stepper gives the same tokens with and without a cache."""
    runner = load_hf_runner(str(folders[variant]))
    trace = runner.run(TEXT)
    eager = type(runner.model).from_pretrained(folders[variant], attn_implementation="eager").eval()
    with torch.inference_mode():
        generated = eager.generate(torch.tensor([trace.ids]), max_new_tokens=CONTINUATION_TOKENS, do_sample=False,
                                   pad_token_id=runner.text.pad_id())[0, len(trace.ids):].tolist()
    assert trace.output_text == runner.text.decode(generated)
    greedy = lambda logits, step: int(logits.argmax())  # noqa: E731
    cached = list(generate(runner.stepper(TEXT, RunOptions()), [], 5, greedy))
    full = list(generate(runner.stepper(TEXT, RunOptions(), use_cache=False), [], 5, greedy))
    assert [s.token_id for s in cached] == [s.token_id for s in full] == generated[:5]


def test_the_trace_says_which_layers_read_in_chunks_and_draws_the_mask_they_read(folders, tmp_path) -> None:
    """The facts hold each layer's chunk (kept by a trace file) and the card says it in words; the Masks page's mask
    of the chunked layer is exactly where its attention is not zero, its cells hidden by the chunk counted apart from
    the causal ones."""
    runner = load_hf_runner(str(folders["plain"]))
    trace = runner.run(TEXT)
    assert trace.facts.chunks == [CHUNK, 0]
    trace.save(tmp_path / "llama4.npz")
    assert Trace.load(tmp_path / "llama4.npz").facts.chunks == [CHUNK, 0]
    assert trace.facts.notes["chunked attention"] == (
        "layer 0: each token sees only the tokens of its own chunk of 3 positions (0–2, 3–5, …) up to itself; the "
        "other layers see every token before it")
    for layer in (0, 1):
        mask = SiteMask.of(trace, "decoder.attn", layer)
        attended = trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32).sum(0) > 0  # (len, len)
        np.testing.assert_array_equal(mask.visible, attended)
        assert mask.chunk == (CHUNK if layer == 0 else 0)
    n = len(trace.ids)  # 10: <s> and nine words; chunks 0-2, 3-5, 6-8, 9
    assert SiteMask.of(trace, "decoder.attn", 0).counts() == {"causal": n * (n - 1) // 2, "chunk": 3 * 3 + 6 * 3 + 9}


def test_the_experts_output_is_read_per_position_and_the_hooks_add_up(folders, tmp_path) -> None:
    """Llama 4's mixture of experts returns its output flattened, (tokens, d_model): hook_mlp_out is still (len,
    d_model), hook_resid_post = hook_resid_mid + hook_mlp_out, and the trace is written and read back (it was refused
    as damaged, its hook_mlp_out one token's)."""
    trace = load_hf_runner(str(folders["both"])).run(TEXT, options=RunOptions(hooks=("*",)))
    c = {name: torch.from_numpy(np.asarray(value)) for name, value in trace.captured.items()}
    for layer in (0, 1):
        assert c[f"decoder.{layer}.hook_mlp_out"].shape == (len(trace.ids), 32)
        torch.testing.assert_close(c[f"decoder.{layer}.hook_resid_post"],
                                   c[f"decoder.{layer}.hook_resid_mid"] + c[f"decoder.{layer}.hook_mlp_out"])
    trace.save(tmp_path / "hooks.npz")
    assert set(Trace.load(tmp_path / "hooks.npz").captured) == set(trace.captured)
