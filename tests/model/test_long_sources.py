"""A long text's attention sources kept in 16 bits (model/core/capture/host_copies.py FULL_PRECISION_BYTES, RowScaled):
a float32 run whose queries and keys would take more than the limit keeps int16 steps of a float32 scale a row, and
at 4,096 tokens every pattern computed from them is within 2e-3 of transformers' eager attention, in about half the
bytes; the same numbers rounded to bfloat16 would miss that (the model's patterns are sharp enough to tell). A run
within the limit keeps float32; a trace file keeps the 16 bits."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import transformers

from attention_atlas import load_trace
from attention_atlas.model.core.attention.arrays import RowScaled, as_tensor
from attention_atlas.model.core.capture import host_copies
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import distinct_nbytes
from attention_atlas.model.hf.loading import load_hf_runner
from tests import tiny_hf

TOKENS = 4096
LAYERS, HEADS, KV_HEADS, D_HEAD = 2, 4, 2, 16
FRAME = RunOptions(hooks=("*.hook_pattern",), summarised=True)  # the app's run (ui/runs.py)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Llama reading 4,096 tokens, its weights 25 times the usual spread: sharp patterns, whose
    largest weights a rounding of the queries and keys moves most."""
    shape = {"hidden_size": HEADS * D_HEAD, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
             "num_key_value_heads": KV_HEADS, "head_dim": D_HEAD}
    return tiny_hf.build("llama", tmp_path_factory.mktemp("long") / "llama", **shape, max_position_embeddings=TOKENS,
                         initializer_range=0.5)


def words(count: int) -> str:
    rng = random.Random(0)
    return " ".join(rng.choice(tiny_hf.WORDS) for _ in range(count))


def float32_bytes(tokens: int) -> int:
    """The run's queries and keys in float32: every layer's (heads + kv heads) x tokens x d_head numbers."""
    return LAYERS * (HEADS + KV_HEADS) * tokens * D_HEAD * 4


def test_sources_past_the_limit_keep_16_bits_within_2e_3_of_eager(folder, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(host_copies, "FULL_PRECISION_BYTES", float32_bytes(TOKENS) - 1)  # just too large
    runner = load_hf_runner(str(folder))
    text = words(TOKENS - 1)  # and <s>
    trace = runner.run(text, options=FRAME)
    assert len(trace.tokens) == TOKENS
    eager = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        reference = eager(torch.tensor([trace.ids]), output_attentions=True).attentions  # (1, heads, L, L) a layer
    kept, sharp = [], []
    for layer in range(LAYERS):
        source = trace.pattern_source("decoder.attn", layer)
        assert isinstance(source.query, RowScaled) and isinstance(source.key, RowScaled)
        kept += [*source.query.arrays(), *source.key.arrays()]
        expected = reference[layer][0].numpy()
        assert np.abs(source.pattern(dtype=np.float32) - expected).max() <= 2e-3
        assert expected.max(-1).mean() > 0.5  # most rows give one key most of their weight
        bf16 = [as_tensor(part, torch.device("cpu")).bfloat16().float().numpy() for part in (source.query, source.key)]
        rounded = type(source)(query=bf16[0], key=bf16[1], scale=source.scale, allowed=source.allowed)
        sharp.append(np.abs(rounded.pattern(dtype=np.float32) - expected).max())
    assert max(sharp) > 2e-3  # bfloat16 queries and keys would not do
    # 2 bytes a number and 4 a row (d_head 16 numbers: 2.25 bytes a number here; 2.06 at SmolLM2's 64)
    assert distinct_nbytes(kept) == LAYERS * (HEADS + KV_HEADS) * TOKENS * (2 * D_HEAD + 4)
    assert distinct_nbytes(kept) <= 0.6 * float32_bytes(TOKENS)
    trace.save(tmp_path / "long.npz")
    again = load_trace(tmp_path / "long.npz")
    source = again.pattern_source("decoder.attn", 1)
    assert isinstance(source.query, RowScaled) and source.query.dtype == np.int16
    rows = [0, 17, TOKENS - 1]
    np.testing.assert_array_equal(again.head_pattern("decoder.attn", 1, 2, rows),
                                  trace.head_pattern("decoder.attn", 1, 2, rows))


def test_sources_within_the_limit_stay_float32(folder, monkeypatch) -> None:
    monkeypatch.setattr(host_copies, "FULL_PRECISION_BYTES", float32_bytes(64))  # exactly as large: they fit
    trace = load_hf_runner(str(folder)).run(words(63), options=FRAME)
    source = trace.pattern_source("decoder.attn", 0)
    assert len(trace.tokens) == 64 and source.query.dtype == np.float32 and source.key.dtype == np.float32


def test_a_row_of_zeros_and_a_row_with_nan_read_back_as_they_were() -> None:
    """A scale of 0 would divide by 0; a NaN would not fit an int16: zeros stay zeros, a NaN row reads as NaN."""
    from attention_atlas.model.core.attention.arrays import row_steps

    rows = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5], [1.0, float("nan"), 2.0], [3.0, float("inf"), 0.0]])
    kept = RowScaled(*(t.numpy() for t in row_steps(rows)))
    back = as_tensor(kept, torch.device("cpu"))
    assert back[0].tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(back[1].numpy(), rows[1].numpy(), atol=2.0 / 65534)
    assert back[2].isnan().all() and back[3].isnan().all()
