"""Head ablation (model/core/capture/ablation.py) and the scan of every head (model/inspect/ablation.py), on the
from-scratch models and every Hugging Face family: an ablation changes exactly the head it names, in this
thread's run only, and the batched scan measures what a run of that one ablation shows."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.ablation import every_head, kl_divergence, per_position_change, scan_heads
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import FAMILIES

TEXT, TARGET = "the quick brown fox jumps over the lazy dog", "the cat sat on the mat"
TOY_IDS = ("toy-date", "toy-gpt-date")


def _runner(name: str, runners: dict):
    return runners[name] if name in FAMILIES else load_runner(name, device="cpu")


def _text(name: str, runner) -> str:
    return TEXT if name in FAMILIES else runner.examples[0]


def _later_head(trace) -> tuple[str, int]:
    """A head in the second layer of the model's first stack, so that layer 0 comes before it."""
    site = next(iter(trace.masks))
    stack, kind = site.split(".")
    return f"{stack}.1.{kind}", 2


BEFORE_Z = ("hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_",
            "attn.hook_attn_scores", "attn.hook_pattern")  # the layer's hooks upstream of its heads' outputs


@pytest.mark.parametrize("name", [*TOY_IDS, *FAMILIES])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablating_a_head_changes_that_head_and_nothing_before_it(name: str, mode: str, runners) -> None:
    runner = _runner(name, runners)
    text = _text(name, runner)
    whole = runner.run(text, options=RunOptions(hooks=("*",)))
    # read the same output both times: the ablated model may write another one
    target = whole.output_text if name in TOY_IDS else TARGET if runner.facts.kind == "encoder-decoder" else None
    whole = runner.run(text, target, RunOptions(hooks=("*",)))
    head = _later_head(whole)
    ablated = runner.run(text, target, RunOptions(hooks=("*",), ablated=(head,), ablation=mode))
    z_name = f"{head[0]}.hook_z"
    z_whole, z_ablated = whole.captured[z_name], ablated.captured[z_name]  # (heads, pos, d_head)
    expected = np.zeros_like(z_whole[2]) if mode == "zero" else np.broadcast_to(
        z_whole[2].mean(0, keepdims=True), z_whole[2].shape)
    np.testing.assert_allclose(z_ablated[2], expected, atol=1e-6)
    assert np.abs(z_whole[2] - expected).max() > 1e-4  # the head did carry something to replace
    np.testing.assert_array_equal(np.delete(z_ablated, 2, axis=0), np.delete(z_whole, 2, axis=0))
    stack = head[0].split(".")[0]
    before_z = BEFORE_Z + (("ln1.",) if whole.facts.norm == "pre-norm" else ())  # post-norm: ln1 follows attention
    embeddings = (f"{stack}.hook_embed", f"{stack}.hook_pos_embed")
    upstream = [n for n in whole.captured if n.startswith(f"{stack}.0.") or n in embeddings
                or n.removeprefix(f"{stack}.1.").startswith(before_z)]
    assert len(upstream) > 10
    for hook in upstream:
        np.testing.assert_array_equal(ablated.captured[hook], whole.captured[hook], err_msg=hook)
    attn_out = f"{stack}.1.hook_attn_out"
    assert not np.array_equal(ablated.captured[attn_out], whole.captured[attn_out])


@pytest.mark.parametrize("name", [*TOY_IDS, pytest.param("smollm2", marks=pytest.mark.slow), "minilm"])
def test_ablating_no_head_leaves_every_value_bit_identical(name: str) -> None:
    runner = load_runner(name, device="cpu")
    plain = runner.run(runner.examples[0], options=RunOptions(hooks=("*",)))
    empty = runner.run(runner.examples[0], options=RunOptions(hooks=("*",), ablated=(), ablation="mean"))
    assert plain.output_text == empty.output_text
    for hook, value in plain.captured.items():
        np.testing.assert_array_equal(empty.captured[hook], value, err_msg=hook)
    rows = runner.ablation_outcomes(plain, [(), ()], "zero").values
    # two rows of one batch: equal to float32 rounding (the matrix library may tile the rows of a batch apart)
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", [*TOY_IDS, pytest.param("smollm2", marks=pytest.mark.slow), "minilm", "t5", "bart"])
def test_a_batch_row_measures_what_a_run_of_that_ablation_gives(name: str, runners) -> None:
    """Each row of a batched scan ablates its own head only: row k equals a batch of one ablating the same head,
    and the causal LM's row gives the ablated run's own next-token probabilities."""
    runner = _runner(name, runners)
    trace = runner.run(_text(name, runner), options=RunOptions(hooks=()))
    heads = every_head(trace)[:6]
    batch = runner.ablation_outcomes(trace, [(), *[(h,) for h in heads]], "zero")
    for k, head in enumerate(heads, start=1):
        alone = runner.ablation_outcomes(trace, [(head,)], "zero")
        np.testing.assert_allclose(batch.values[k], alone.values[0], atol=1e-5, rtol=1e-4)
    assert any(per_position_change(batch, 0, k).max() > 1e-9 for k in range(1, len(heads) + 1))  # tiny: ~1e-7
    if name == "smollm2":
        after = runner.run(_text(name, runner), options=RunOptions(hooks=(), ablated=(heads[3],)))
        probs = np.exp(batch.values[4, 0])  # (vocab,)
        np.testing.assert_allclose(probs[after.outputs["top_next_ids"]], after.outputs["top_next_probs"], atol=1e-5)


def test_the_scan_ranks_every_head_by_the_change_its_ablation_makes() -> None:
    runner = load_runner("toy-date", device="cpu")
    trace = runner.run(runner.examples[0], options=RunOptions(hooks=()))
    progress: list[tuple[int, int]] = []
    scan = scan_heads(runner, trace, "zero", lambda done, total: progress.append((done, total)), tokens_per_pass=40)
    heads = every_head(trace)
    assert len(progress) > 1 and progress[-1] == (len(heads), len(heads))
    assert set(scan.effects) == set(trace.masks)
    ranked = scan.ranked()
    assert len(ranked) == len(heads) and [v for _, v in ranked] == sorted((v for _, v in ranked), reverse=True)
    top_head, top_change = ranked[0]
    outcome = runner.ablation_outcomes(trace, [(), (top_head,)], "zero")
    assert top_change == pytest.approx(float(kl_divergence(outcome.values[0], outcome.values[1]).mean()), abs=1e-6)


def test_ablating_every_head_gives_a_defined_result() -> None:
    runner = load_runner("smollm2", device="cpu")
    trace = runner.run("The capital of France is", options=RunOptions(hooks=()))
    every = tuple(every_head(trace))
    ablated = runner.run("The capital of France is", options=RunOptions(hooks=(), ablated=every))
    assert np.isfinite(ablated.outputs["top_next_probs"]).all() and ablated.output_text
    assert ablated.outputs["top_next_ids"][0] != trace.outputs["top_next_ids"][0]


@pytest.mark.parametrize("head", [("decoder.0.attn", 9), ("decoder.0.attn", -1), ("decoder.99.attn", 0),
                                  ("encoder.0.attn", 0)])
def test_a_head_the_model_lacks_is_refused_with_a_message(head) -> None:
    runner = load_runner("smollm2", device="cpu")
    with pytest.raises(ValueError, match=r"no attention heads at|there is no head"):
        runner.run("Hello", options=RunOptions(hooks=(), ablated=(head,)))


@pytest.mark.slow  # SmolLM2, many runs in two threads
def test_an_ablation_in_one_thread_never_shows_in_a_concurrent_run() -> None:
    """Two threads on the one shared model: one ablates heads, the other reads the model whole; the whole one's
    values are always exactly those of a run alone (the model is never changed)."""
    runner = load_runner("smollm2", device="cpu")
    text = "The capital of France is"
    reference = runner.run(text, options=RunOptions(hooks=("*.hook_resid_post",)))
    every = tuple(every_head(reference))
    start = threading.Barrier(2)
    seen: list[np.ndarray] = []
    ablated_firsts: list[int] = []

    def ablate() -> None:
        start.wait()
        for _ in range(4):
            trace = runner.run(text, options=RunOptions(hooks=(), ablated=every))
            ablated_firsts.append(int(trace.outputs["top_next_ids"][0]))

    def read() -> None:
        start.wait()
        for _ in range(4):
            trace = runner.run(text, options=RunOptions(hooks=("*.hook_resid_post",)))
            seen.append(trace.captured["decoder.29.hook_resid_post"])

    threads = [threading.Thread(target=ablate), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 and len(ablated_firsts) == 4
    for value in seen:
        np.testing.assert_array_equal(value, reference.captured["decoder.29.hook_resid_post"])
    assert all(first != reference.outputs["top_next_ids"][0] for first in ablated_firsts)
