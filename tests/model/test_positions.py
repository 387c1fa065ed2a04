"""The sinusoid and its shift identity in float64, size checks, and what each model family does with positions,
read from its own weights (model/inspect/positions.py)."""

import numpy as np
import pytest

from attention_atlas.model.core import sinusoid as pe
from attention_atlas.model.inspect.positions import position_scheme
from attention_atlas.model.registry import load_runner
from attention_atlas.model.scratch.layers import sinusoidal_table


@pytest.mark.parametrize(("length", "d_model"), [(1, 2), (13, 64), (300, 512), (64, 6)])
def test_the_sinusoid_equals_the_from_scratch_formula(length: int, d_model: int) -> None:
    np.testing.assert_allclose(pe.sinusoid(length, d_model), sinusoidal_table(length, d_model).double(), atol=1e-7)


@pytest.mark.parametrize(("length", "d_model", "k"), [(64, 64, 1), (64, 64, 37), (512, 384, 100), (2048, 576, 2000)])
def test_the_shift_is_a_rotation_of_each_pair(length: int, d_model: int, k: int) -> None:
    table = pe.sinusoid(length, d_model)
    assert pe.shift_error(table, k) <= 1e-6
    assert pe.shift_error(table, k) > 0.0 or k == 0  # computed, not assumed: float64 rounding shows
    blocks = pe.rotation_blocks(k, d_model)  # (pairs, 2, 2), orthogonal with determinant 1
    np.testing.assert_allclose(blocks @ blocks.transpose(0, 2, 1), np.broadcast_to(np.eye(2), blocks.shape),
                               atol=1e-12)
    assert np.abs(table[: length - k] - table[k:]).max() > 0.1  # without the rotation: far from PE(pos + k)


def test_the_dot_product_depends_only_on_the_offset() -> None:
    table = pe.sinusoid(50, 32)
    sims = pe.similarity(table)
    profile = pe.distance_profile(sims)
    for k in (0, 1, 7, 49):
        np.testing.assert_allclose(np.diagonal(sims, k), profile[k], atol=1e-9)
        assert profile[k] == pytest.approx(np.cos(k * pe.frequencies(32)).sum())
    assert profile[0] == pytest.approx(16.0)  # d/2: sin² + cos² per pair
    assert pe.similarity(table, cosine=True)[3, 3] == pytest.approx(1.0)


@pytest.mark.parametrize(("length", "d_model", "message"), [
    (65, 64, "at most 64"), (0, 64, "at least 1"), (10, 7, "must be even (7 is odd)"),
    (10, 100_000, "between 2 and 8,192"), (10, 0, "between 2"), (10, -4, "between 2")])
def test_a_size_that_cannot_be_drawn_says_why(length: int, d_model: int, message: str) -> None:
    assert message in pe.check_table_size(length, d_model, max_len=64)


def test_a_size_that_can_be_drawn() -> None:
    assert pe.check_table_size(64, 64, max_len=64) is None


@pytest.mark.parametrize(("model_id", "stack"), [("toy-date", "encoder"), ("toy-date", "decoder"),
                                                 ("toy-gpt-date", "decoder")])
def test_a_from_scratch_model_shows_its_own_buffer(model_id: str, stack: str) -> None:
    runner = load_runner(model_id)
    scheme = position_scheme(runner, stack, 10)
    buffer = getattr(runner.toy.model, stack).pos_table  # (max_len, d_model)
    assert scheme.kind == "sinusoidal" and scheme.table.shape == tuple(buffer.shape)
    np.testing.assert_array_equal(scheme.table, buffer.numpy())
    np.testing.assert_allclose(scheme.table, pe.sinusoid(*buffer.shape), atol=1e-7)


def test_learned_tables_are_the_models_weights(runners) -> None:
    bert, gpt2, bart = runners["bert"].model.base_model, runners["gpt2"].model.base_model, runners["bart"].model
    cases = [(runners["bert"], "encoder", bert.embeddings.position_embeddings.weight),
             (runners["gpt2"], "decoder", gpt2.wpe.weight),
             (runners["bart"], "decoder", bart.base_model.decoder.embed_positions.weight[2:])]
    for runner, stack, weight in cases:
        scheme = position_scheme(runner, stack, 8)
        assert scheme.kind == "learned"
        np.testing.assert_array_equal(scheme.table, weight.detach().numpy())


def test_marian_is_a_sinusoid_with_its_sines_first(runners) -> None:
    scheme = position_scheme(runners["marian"], "encoder", 8)
    assert scheme.kind == "sinusoidal" and scheme.halves
    reference = pe.sinusoid(len(scheme.table), scheme.table.shape[1])
    np.testing.assert_allclose(scheme.table, np.concatenate([reference[:, 0::2], reference[:, 1::2]], 1), atol=1e-6)


def test_rotary_frequencies_and_scores_come_from_the_models_rotary_module(runners) -> None:
    llama = runners["llama"].model
    scheme = position_scheme(runners["llama"], "decoder", 20)
    head_dim = llama.config.hidden_size // llama.config.num_attention_heads  # 8
    assert scheme.kind == "rotary" and scheme.table is None
    np.testing.assert_allclose(scheme.inv_freq, pe.frequencies(head_dim, scheme.rotary_base), rtol=1e-6)
    distance = np.arange(20)[:, None]
    expected = 2 * np.cos(distance * scheme.inv_freq).sum(1)  # q = k = ones: each pair gives 2 cos(d θ_i)
    np.testing.assert_allclose(scheme.rotary_profile, expected, atol=1e-4)
    assert scheme.rotary_profile[0] == pytest.approx(head_dim, abs=1e-4)
    assert scheme.rotary_spread < 1e-4  # q·k depends on the distance only


def test_t5_bias_is_bucketed_by_relative_distance(runners) -> None:
    t5 = runners["t5"].model
    scheme = position_scheme(runners["t5"], "encoder", 6)
    assert scheme.kind == "relative" and scheme.bias.shape == (4, 11)
    weight = t5.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight  # (buckets, heads)
    np.testing.assert_array_equal(scheme.bias[:, 5], weight[0].detach().numpy())  # distance 0 is bucket 0
    decoder = position_scheme(runners["t5"], "decoder", 6)
    assert not np.array_equal(decoder.bias, scheme.bias)  # its own table, one-directional buckets


def test_bloom_s_alibi_is_each_heads_slope_times_the_distance(tmp_path) -> None:
    """The bias drawn per head and distance is what BLOOM adds: transformers' slopes x (key - query)."""
    import torch
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    from attention_atlas.model.hf.loading import load_hf_runner
    from tests.tiny_hf import build_type

    scheme = position_scheme(load_hf_runner(str(build_type("bloom", tmp_path / "bloom"))), "decoder", 6)
    slopes = _get_alibi_slopes(4, torch.device("cpu")).numpy()
    assert scheme.kind == "relative" and "ALiBi" in scheme.about
    np.testing.assert_allclose(scheme.bias, slopes[:, None] * np.arange(-5, 6)[None], rtol=1e-6)


def test_deberta_reads_one_embedding_row_per_distance_exact_near_and_shared_far(tmp_path) -> None:
    """DeBERTa-v3's buckets (4 here, with 16 positions): distances within 2 read rows of their own, farther ones
    share rows, and the row each reads is the one its content-to-position term gathers."""
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    from attention_atlas.model.hf.loading import load_hf_runner
    from tests.tiny_hf import build_type

    runner = load_hf_runner(str(build_type("deberta-v2", tmp_path / "deberta")))
    scheme = position_scheme(runner, "encoder", 12)
    assert scheme.kind == "relative" and scheme.bias is None and "c2p" in scheme.about
    attention = runner.model.encoder.layer[0].attention.self
    queries = torch.zeros(1, 12, 8)
    relative = build_relative_position(queries, queries, attention.position_buckets, attention.max_relative_positions)
    span = attention.pos_ebd_size
    gathered = torch.clamp(relative[0] + span, 0, 2 * span - 1).numpy()  # (q, k): the row query q reads for key k
    np.testing.assert_array_equal(scheme.buckets[11 - np.arange(12)], gathered[:, 0])  # key 0: key - query = -q
    rows = scheme.buckets
    assert len(set(rows[9:14])) == 5 and len(set(rows)) < len(rows)  # exact within 2, shared beyond
