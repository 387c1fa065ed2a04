"""The longest text a Hugging Face model reads (model/hf/facts.py): its own position limit, at most 32,768 tokens,
and only as long as what a run keeps to compute its attention patterns from fits in SOURCE_BYTES_LIMIT (its mask kept
as a run without padding keeps it: its diagonals)."""

from __future__ import annotations

import pytest
import transformers

from attention_atlas.model.core.trace.trace import distinct_nbytes
from attention_atlas.model.hf.facts import LONGEST_INPUT, SOURCE_BYTES_LIMIT, longest_input, source_bytes
from attention_atlas.model.hf.families.bert import BERT
from attention_atlas.model.hf.families.t5 import T5
from attention_atlas.model.hf.taps import Family
from tests import tiny_hf

GIB = 1 << 30
DECODER = Family(name="a decoder", kind="decoder", positional="rotary", norm="pre-norm", stack_taps={},
                 layer_taps={}, layer_counts={"decoder": lambda c: c.num_hidden_layers})  # as model/hf/discovery.py


def test_smollm2_reads_its_whole_8192_tokens() -> None:
    config = transformers.LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                                      num_key_value_heads=3, max_position_embeddings=8192)
    # 30 layers x (9 query + 3 key heads) x 64 x 4 bytes a token, and one (L, L) bool mask
    assert source_bytes(config, DECODER, 8192) == 8192 * 30 * 12 * 64 * 4 + 8192**2  # 784 MiB
    assert longest_input(config, DECODER) == 8192


def test_minilm_and_gpt2_read_their_own_limit() -> None:
    minilm = transformers.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                     max_position_embeddings=512)
    assert longest_input(minilm, BERT) == 512
    assert longest_input(transformers.GPT2Config(n_positions=1024), DECODER) == 1024


def test_a_tiny_t5_without_a_position_limit_stops_where_its_position_biases_fill_the_limit() -> None:
    config = tiny_hf.config("t5")  # 2 + 2 layers, 4 heads, d_kv 8; no max_position_embeddings
    # 3 sites (encoder self, decoder self, cross) x 2 layers x (4 + 4) heads x 8 x 4 bytes a token;
    # each site's (L, L) bool mask and (4, L, L) float32 bias: 3 x (1 + 16) bytes a pair of tokens
    per_token, per_pair = 3 * 2 * 8 * 8 * 4, 3 * (1 + 16)
    assert source_bytes(config, T5, 100) == 100 * per_token + 100**2 * per_pair
    # the longest input counts each mask as its 2L diagonals, a run without padding's: 3 x 2 bytes a token more
    assert source_bytes(config, T5, 100, whole_masks=False) == 100 * (per_token + 6) + 100**2 * (per_pair - 3)
    length = longest_input(config, T5)
    assert length == 4713 < LONGEST_INPUT
    assert source_bytes(config, T5, length, whole_masks=False) <= SOURCE_BYTES_LIMIT < \
        source_bytes(config, T5, length + 1, whole_masks=False)


def test_a_wide_model_reads_fewer_tokens_than_its_own_limit() -> None:
    wide = transformers.LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                    num_key_value_heads=32, max_position_embeddings=131072)
    # 32 layers x 64 heads x 128 x 4 = 1 MiB a token: 1,023 tokens and their mask fit in 1 GiB, 1,024 do not
    assert longest_input(wide, DECODER) == 1023
    assert longest_input(wide, DECODER, byte_limit=GIB // 2) == 511
    # run in bfloat16 or float16, its queries and keys are kept in 2 bytes: twice the tokens, less the mask's share
    assert longest_input(wide, DECODER, number_bytes=2) == 2047


def test_a_random_4_layer_smollm2_shape_reads_32768_tokens() -> None:
    """bench/long_32k.py's model: 4 x 12 heads x 64 x 4 bytes a token, 384 MiB at 32,768 tokens, and its mask's
    diagonals (a whole (L, L) mask of bools alone would be the whole 1 GiB)."""
    config = transformers.LlamaConfig(hidden_size=576, num_hidden_layers=4, num_attention_heads=9,
                                      num_key_value_heads=3, max_position_embeddings=32768)
    assert longest_input(config, DECODER) == 32768 == LONGEST_INPUT
    assert source_bytes(config, DECODER, 32768, whole_masks=False) == 32768 * (4 * 12 * 64 * 4 + 2)


@pytest.mark.parametrize("family", tiny_hf.FAMILIES)
def test_source_bytes_counts_what_a_run_keeps(runners, family: str) -> None:
    runner = runners[family]
    target = "the cat sat on the mat" if runner.family.kind == "encoder-decoder" else None
    trace = runner.run("the quick brown fox jumps over the lazy dog " * 3, target)
    kept = distinct_nbytes([array for source in trace.pattern_sources.values() for array in source.arrays()])
    longest = max(len(trace.tokens), len(trace.target_tokens))
    if runner.family.kind == "encoder-decoder":  # a source and a target of the longer one's length: a bound
        assert kept <= source_bytes(runner.model.config, runner.family, longest)
    else:
        assert kept == _with_diagonal_masks(runner, longest) < source_bytes(runner.model.config, runner.family, longest)
    assert runner.facts.max_len == longest_input(runner.model.config, runner.family)


@pytest.mark.parametrize("model_type", ["bloom", "deberta-v2"])
def test_source_bytes_counts_a_position_bias_once_or_per_layer(tmp_path, model_type: str) -> None:
    """BLOOM's ALiBi: one bias every layer shares; DeBERTa's position terms: one a layer. What a run keeps is what
    the longest input counts."""
    from attention_atlas.model.hf.loading import load_hf_runner

    runner = load_hf_runner(str(tiny_hf.build_type(model_type, tmp_path / model_type)))
    trace = runner.run("the quick brown fox jumps over the lazy dog " * 3)
    kept = distinct_nbytes([array for source in trace.pattern_sources.values() for array in source.arrays()])
    assert kept == _with_diagonal_masks(runner, len(trace.tokens))


def _with_diagonal_masks(runner, length: int) -> int:
    """`source_bytes` of a one-site model's run with its mask kept as a run without padding or hidden pairs keeps
    it (model/core/trace/kept_masks.py): its 2L - 1 diagonals, where `source_bytes` counts the L x L bools a mask
    with hidden pairs takes."""
    return source_bytes(runner.model.config, runner.family, length) - length**2 + 2 * length - 1
