"""A model on NDIF, simulated (nnsight's request round trip, model/ndif): its runs equal the local Hugging Face run of
the same folder, hook by hook, pattern by pattern, in its summary and its output, with heads ablated too; and what came
back is the queries and keys the run needs, no more: the app's frame run brings back its summary alone (made on NDIF,
under sliding windows, soft caps and sinks too), and a layer's queries and keys when a view opens it."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.model.core.attention.summary import ROLLOUT_SIZE
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.ndif.fetched import KEPT_BYTES, fetch_allowance
from attention_atlas.model.ndif.opening import open_ndif
from attention_atlas.model.ndif.status import following
from attention_atlas.model.ndif.transfer import summary_bytes, transfer_of, wire_bytes
from tests.tiny_hf import build, build_type
from tests.tiny_sinks import build_gpt_oss

TEXT = "the quick brown fox jumps over the lazy dog"
TOLERANCE = 1e-4
FAMILIES = ("gpt2", "llama")  # Llama: grouped-query (4 heads, 2 key/value heads) and rotary
pytestmark = pytest.mark.slow  # opening a model on NDIF builds and probes its twin and loads nnsight: seconds


@pytest.fixture(scope="module")
def pairs(folders) -> dict:
    """Each family's tiny folder opened on NDIF, simulated, and loaded here."""
    return {family: (open_ndif(str(folders[family]), simulate=True), load_hf_runner(str(folders[family])))
            for family in FAMILIES}


@pytest.fixture(scope="module")
def long_pair(tmp_path_factory) -> tuple:
    """The tiny Llama with room for 1,024 positions, on NDIF (simulated) and here."""
    folder = build("llama", tmp_path_factory.mktemp("ndif_long") / "llama", max_position_embeddings=1024)
    return open_ndif(str(folder), simulate=True), load_hf_runner(str(folder))


def largest_difference(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def assert_same_hooks(ndif, local) -> None:
    assert ndif.names() == local.names()
    for name in local.names():
        assert largest_difference(ndif[name], local[name]) <= TOLERANCE, name


@pytest.mark.parametrize("family", FAMILIES)
def test_the_apps_run_patterns_and_summary_equal_the_local_run(pairs, family) -> None:
    ndif_runner, local_runner = pairs[family]
    options = RunOptions(hooks=("*.hook_pattern",), summarised=True)
    ndif, local = ndif_runner.run(TEXT, None, options), local_runner.run(TEXT, None, options)
    assert ndif.names() == local.names() and len(local.names()) == 2
    for layer in range(2):
        drawn = ndif.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)
        assert largest_difference(drawn, local.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)) \
            <= TOLERANCE
    ours, theirs = ndif.summaries["decoder.attn"], local.summaries["decoder.attn"]
    assert largest_difference(ours.thumbnails, theirs.thumbnails) <= TOLERANCE
    assert np.allclose(ours.statistics, theirs.statistics, atol=TOLERANCE, equal_nan=True)
    assert largest_difference(ours.rollout, theirs.rollout) <= TOLERANCE
    assert (ndif.output_text, ndif.output_kind) == (local.output_text, "generated")
    assert list(ndif.outputs["top_next_ids"]) == list(local.outputs["top_next_ids"])
    assert ndif.facts.device == "NDIF (simulated)" and ndif.tokens == local.tokens


@pytest.mark.parametrize("family", FAMILIES)
def test_a_run_of_every_hook_equals_the_local_run(pairs, family) -> None:
    ndif_runner, local_runner = pairs[family]
    options = RunOptions(hooks=("*",))
    ndif, local = ndif_runner.run(TEXT, "paris is", options), local_runner.run(TEXT, "paris is", options)
    assert len(local.names()) > 30  # every hook of two layers: stream, norms, q k v z, pattern, scores, MLP …
    assert_same_hooks(ndif, local)
    for key in ("forced_probs", "forced_ranks", "top_next_probs"):
        assert largest_difference(ndif.outputs[key], local.outputs[key]) <= TOLERANCE
    assert ndif.output_kind == "teacher-forced"


@pytest.mark.parametrize(("family", "mode"), [("llama", "zero"), ("gpt2", "mean")])
def test_ablated_heads_are_ablated_on_ndif_as_here(pairs, family, mode) -> None:
    ndif_runner, local_runner = pairs[family]
    ablated = RunOptions(hooks=("*.hook_z", "*.hook_pattern"), ablated=(("decoder.0.attn", 1), ("decoder.1.attn", 2)),
                         ablation=mode)
    ndif, local = ndif_runner.run(TEXT, None, ablated), local_runner.run(TEXT, None, ablated)
    whole = local_runner.run(TEXT, None, RunOptions(hooks=("*.hook_z", "*.hook_pattern")))
    assert_same_hooks(ndif, local)
    assert ndif.output_text == local.output_text
    z, z_whole = ndif["decoder.0.attn.hook_z"][1], whole["decoder.0.attn.hook_z"][1]  # (positions, d_head)
    assert np.allclose(z, 0 if mode == "zero" else z_whole.mean(0), atol=1e-6)
    assert largest_difference(z, z_whole) > 1e-2
    # the edit was made on NDIF: the next layer's queries and keys, computed there, read the ablated output
    later, later_whole = (trace.pattern_source("decoder.attn", 1).pattern(dtype=np.float32) for trace in (ndif, whole))
    assert largest_difference(later, later_whole) > 1e-5


def test_a_run_brings_back_the_queries_and_keys_it_needs_and_the_values_only_where_asked(pairs) -> None:
    runner = pairs["llama"][0]  # 2 layers, 4 query heads and 2 key/value heads of 8 dimensions, float32
    told: list[str] = []
    with following(told.append):
        patterns = runner.run(TEXT, "dog", RunOptions(hooks=("*.hook_pattern",)))
    assert told == ["NDIF (simulated): received", "NDIF (simulated): running", "NDIF: completed"]
    values = runner.run(TEXT, "dog", RunOptions(hooks=("*.hook_pattern", "*.hook_z")))
    one_layer = runner.run(TEXT, "dog", RunOptions(hooks=("decoder.1.attn.hook_pattern",)))
    tokens = len(patterns.tokens)
    queries_and_keys = wire_bytes(2, 4, 2, 8, tokens, number_bytes=4)
    logits = 2 * runner.facts.vocab_size * 4  # the last two positions': the target's token and the next
    received = [transfer_of(trace).received for trace in (patterns, values, one_layer)]
    overhead = received[0] - queries_and_keys - logits  # torch.save's own bytes: names, shapes, a zip's records
    assert 0 < overhead < 12_000
    assert received[1] - received[0] == pytest.approx(wire_bytes(2, 0, 2, 8, tokens, number_bytes=4), abs=2_000)
    assert received[0] - received[2] == pytest.approx(queries_and_keys / 2, abs=2_000)
    assert all(transfer_of(trace).simulated and transfer_of(trace).sent > 1_000 for trace in (patterns, values))


def test_a_batch_of_ablated_runs_gives_the_local_outcomes(pairs) -> None:
    ndif_runner, local_runner = pairs["llama"]
    trace = ndif_runner.run(TEXT, None, RunOptions(hooks=("*.hook_pattern",)))
    rows = [(), (("decoder.0.attn", 1),), (("decoder.1.attn", 0), ("decoder.1.attn", 3))]
    ours = ndif_runner.ablation_outcomes(trace, rows, "mean")
    theirs = local_runner.ablation_outcomes(local_runner.run(TEXT, None, RunOptions()), rows, "mean")
    assert ours.values.shape == theirs.values.shape == (3, 1, ndif_runner.facts.vocab_size)
    assert ours.positions == theirs.positions and largest_difference(ours.values, theirs.values) <= TOLERANCE
    assert largest_difference(ours.values[0], ours.values[2]) > 1e-4  # the rows differ: each its own heads ablated


def assert_same_summary(ours, theirs) -> None:
    assert largest_difference(ours.thumbnails, theirs.thumbnails) <= TOLERANCE
    assert np.allclose(ours.statistics, theirs.statistics, rtol=1e-5, atol=TOLERANCE, equal_nan=True)
    assert largest_difference(ours.rollout, theirs.rollout) <= TOLERANCE


def test_the_apps_run_is_summarised_on_ndif_and_a_layer_comes_when_a_view_opens_it(long_pair) -> None:
    ndif_runner, local_runner = long_pair  # 2 layers, 4 query heads and 2 key/value heads of 8 dimensions, float32
    words = TEXT.split()
    text = " ".join(words[i * 7 % len(words)] for i in range(600))  # a text that repeats: induction targets
    options = RunOptions(hooks=("*.hook_pattern",), summarised=True, ablated=(("decoder.0.attn", 1),))
    ndif, local = ndif_runner.run(text, None, options), local_runner.run(text, None, options)
    n = len(local.tokens)
    assert n > ROLLOUT_SIZE  # the rollout in blocks of positions, the thumbnails in blocks of rows and columns
    assert_same_summary(ndif.summaries["decoder.attn"], local.summaries["decoder.attn"])
    assert ndif.names() == local.names() and ndif.output_text == local.output_text
    run = transfer_of(ndif)
    logits = ndif_runner.facts.vocab_size * 4  # the next token's
    assert run.requests == 1 and 0 < run.received - summary_bytes(2, 4, n) - logits < 12_000  # no queries or keys
    assert ndif.pattern_source("decoder.attn", 1).arrays() == []  # not fetched yet
    layer = wire_bytes(1, 4, 2, 8, n, number_bytes=4)
    allowance, held = fetch_allowance(ndif), ndif.nbytes
    assert allowance == KEPT_BYTES // layer * layer and fetch_allowance(local) == 0  # what the cache counts besides
    drawn = ndif.head_pattern("decoder.attn", 1, 2)  # a view opens head 2 of layer 1: its layer comes
    assert 0 < ndif.nbytes - held <= allowance
    assert largest_difference(drawn, local.head_pattern("decoder.attn", 1, 2)) <= TOLERANCE
    whole = local_runner.run(text, None, RunOptions(hooks=("decoder.1.attn.hook_pattern",)))
    assert largest_difference(drawn, whole.head_pattern("decoder.attn", 1, 2)) > 1e-4  # fetched under the ablation
    opened = transfer_of(ndif)
    assert opened.requests == 2
    assert opened.received - run.received == pytest.approx(wire_bytes(1, 4, 2, 8, n, number_bytes=4), abs=3_000)
    ndif.head_pattern("decoder.attn", 1, 0)
    assert transfer_of(ndif).requests == 2  # kept with the run


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_oss"])
def test_sliding_windows_soft_caps_and_sinks_are_summarised_on_ndif_as_here(tmp_path, model_type) -> None:
    """Gemma 2: a sliding window of 3 and soft-capped scores; GPT-OSS: a sink logit a head and sliding windows."""
    folder = build_gpt_oss(tmp_path / "m") if model_type == "gpt_oss" else build_type(model_type, tmp_path / "m")
    options = RunOptions(hooks=("*.hook_pattern",), summarised=True)
    ndif = open_ndif(str(folder), simulate=True).run(TEXT, None, options)
    local = load_hf_runner(str(folder)).run(TEXT, None, options)
    assert ndif.pattern_source("decoder.attn", 0).arrays() == []  # its queries and keys stayed there
    assert_same_summary(ndif.summaries["decoder.attn"], local.summaries["decoder.attn"])
