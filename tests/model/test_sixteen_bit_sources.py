"""A model running in bfloat16 or float16 has its attention sources kept in those 16 bits on the host (bfloat16 as
its bits, numpy having no bfloat16): exactly the numbers its attention read, in half float32's bytes; the patterns
computed from them are those of the same numbers in float32; a trace file keeps them; the longest input counts 2
bytes a number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas import load_trace
from attention_atlas.model.core.attention.arrays import BFLOAT16_BITS
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.facts import longest_input
from attention_atlas.model.hf.loading import load_hf_runner

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.mark.parametrize(("precision", "kept"), [(torch.bfloat16, BFLOAT16_BITS), (torch.float16, np.float16),
                                                 (torch.float32, np.float32)])
def test_sources_keep_the_numbers_attention_read_in_its_own_width(folders, tmp_path, precision, kept) -> None:
    runner = load_hf_runner(str(folders["llama"]), precision=precision)
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern", "*.hook_rot_q", "*.hook_rot_k")))
    source = trace.pattern_source("decoder.attn", 1)
    assert source.query.dtype == kept and source.key.dtype == kept
    assert source.query.nbytes == (2 if precision != torch.float32 else 4) * source.query.size
    # what attention read (its rotated queries and keys, captured as float32): the same numbers
    np.testing.assert_array_equal(_float(source.query), trace.captured["decoder.1.attn.hook_rot_q"])
    np.testing.assert_array_equal(_float(source.key), trace.captured["decoder.1.attn.hook_rot_k"])
    widened = PatternSource(query=_float(source.query), key=_float(source.key), scale=source.scale,
                            allowed=source.allowed)
    np.testing.assert_array_equal(trace.pattern("decoder.attn", 1), widened.pattern())
    trace.save(tmp_path / "t.npz")
    again = load_trace(tmp_path / "t.npz")
    assert again.pattern_source("decoder.attn", 1).query.dtype == kept
    np.testing.assert_array_equal(again.pattern("decoder.attn", 1), trace.pattern("decoder.attn", 1))
    config, family = runner.model.config, runner.family
    assert runner.facts.max_len == longest_input(config, family, number_bytes=source.query.itemsize)


def _float(array: np.ndarray) -> np.ndarray:
    tensor = torch.from_numpy(array)
    return (tensor.view(torch.bfloat16) if array.dtype == BFLOAT16_BITS else tensor).float().numpy()
