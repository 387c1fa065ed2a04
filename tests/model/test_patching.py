"""Activation patching (model/inspect/patching.py): every kind equal to TransformerLens 3.9's own patching functions
with the logit-difference metric, on the same random weights (GPT-2 and Llama), patched runs batched; attribution
patching equal to the estimate TransformerLens's hooks give; a stop that keeps what is done; and the input a person
can get wrong, told in a sentence."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from transformer_lens import patching as reference_patching

import attention_atlas as aa
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.patching import (
    KINDS,
    attribution_patching,
    estimate_patching,
    patch,
    patching_steps,
    prepare_patching,
)
from tests.tiny_hf import build
from tests.transformer_lens_reference import randomise_norms, reference_of

CLEAN, CORRUPTED = "the quick brown fox", "the quick brown dog"
REFERENCE = {"resid_pre": reference_patching.get_act_patch_resid_pre,
             "attn_out": reference_patching.get_act_patch_attn_out,
             "mlp_out": reference_patching.get_act_patch_mlp_out,
             "head_out": reference_patching.get_act_patch_attn_head_out_all_pos}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_every_kind_is_transformer_lens_own(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    found = patch(runner, CLEAN, CORRUPTED, " fox", " dog", tokens_per_pass=20)  # 5 rows a batch: batches that cut
    # across layers and kinds

    reference = reference_of(family, runner.model).eval()
    tokenizer = runner.text.tokenizer
    clean_ids, corrupted_ids = (torch.tensor([tokenizer(t)["input_ids"]]) for t in (CLEAN, CORRUPTED))
    a, b = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" fox", " dog"))

    def logit_difference(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, a] - logits[0, -1, b]

    _, clean_cache = reference.run_with_cache(clean_ids)
    with torch.no_grad():
        assert found.clean == pytest.approx(float(logit_difference(reference(clean_ids))), abs=2e-5)
        assert found.corrupted == pytest.approx(float(logit_difference(reference(corrupted_ids))), abs=2e-5)
        for kind in KINDS:
            expected = REFERENCE[kind](reference, corrupted_ids, clean_cache, logit_difference)
            np.testing.assert_allclose(found.results[kind], expected.numpy(), atol=5e-5, err_msg=kind)
    assert found.complete and abs(found.clean - found.corrupted) > 1e-3  # the two texts differ at the answer
    assert found.normalised("resid_pre")[0, -1] == pytest.approx(1.0, abs=1e-4)  # the last token, patched: clean


def test_a_stop_keeps_what_is_done(tmp_path) -> None:
    runner = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    stop, seen = threading.Event(), []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        stop.set()  # after the first batch

    found = patch(runner, CLEAN, CORRUPTED, " fox", " dog", tokens_per_pass=16, progress=progress, stop=stop)
    assert seen == [(4, 2 * 4 * 3 + 2 * 4)]  # 2 layers x 4 positions x 3 kinds, 2 layers x 4 heads
    assert not found.complete and np.isfinite(found.results["resid_pre"][0]).all()
    assert np.isnan(found.results["head_out"]).all()


def test_bad_input_gets_a_sentence(tmp_path) -> None:
    runner = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    with pytest.raises(UserError, match=r"as many tokens: the clean one has 4 .*, the corrupted one 3"):
        patch(runner, CLEAN, "the brown dog", " fox", " dog")
    with pytest.raises(UserError, match="must be one token"):
        patch(runner, CLEAN, CORRUPTED, " fox dog", " dog")
    encoder = load_hf_runner(str(build("bert", tmp_path / "bert")))
    with pytest.raises(UserError, match="is an encoder: it predicts no next token, so there is no logit difference"):
        patch(encoder, CLEAN, CORRUPTED, " fox", " dog")


def test_one_preparation_serves_the_estimate_and_the_runs_within_a_limit(tmp_path) -> None:
    """The two runs made once give what `patch` and `attribution_patching` give; the patched runs are counted in
    tokens before any is made, and refused with a sentence over the limit asked for."""
    runner = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    runs = prepare_patching(runner, CLEAN, CORRUPTED, " fox", " dog")
    assert len(runs.cells()) == 2 * 4 * 3 + 2 * 4 and runs.tokens_per_run == 4  # 2 layers x 4 positions x 3, x 4 heads
    assert runs.work == 32 * 4
    with pytest.raises(UserError, match=r"runs the model 32 times over 4 tokens each \(128 tokens\); the limit here "
                                        r"is 127\. Patch fewer kinds or a shorter text"):
        next(patching_steps(runner, runs, max_work=127))
    *_, (done, total, found) = patching_steps(runner, runs, max_work=128)
    assert done == total == 32 and found.complete
    expected = patch(runner, CLEAN, CORRUPTED, " fox", " dog")
    for kind in KINDS:
        np.testing.assert_allclose(found.results[kind], expected.results[kind], atol=1e-6, err_msg=kind)
    assert np.isnan(runs.empty.results["head_out"]).all()  # each patching fills results of its own
    estimate = estimate_patching(runner, runs)
    alone = attribution_patching(runner, CLEAN, CORRUPTED, " fox", " dog")
    for kind in KINDS:
        np.testing.assert_allclose(estimate.results[kind], alone.results[kind], atol=1e-9, err_msg=kind)


def test_the_api(tmp_path) -> None:
    folder = build("gpt2", tmp_path / "gpt2")
    seen = []
    found = aa.load(str(folder)).patch(CLEAN, CORRUPTED, answer=" fox", wrong=" dog", kinds=["head_out"],
                                       progress=lambda done, total: seen.append(done))
    assert list(found.results) == ["head_out"] and found.results["head_out"].shape == (2, 4)
    assert found.complete and seen[-1] == 8
    expected = patch(load_hf_runner(str(folder)), CLEAN, CORRUPTED, " fox", " dog", kinds=("head_out",))
    np.testing.assert_allclose(found.results["head_out"], expected.results["head_out"], atol=1e-6)
    estimate = aa.load(str(folder)).patch(CLEAN, CORRUPTED, answer=" fox", wrong=" dog", estimate=True)
    assert estimate.estimated and set(estimate.results) == set(KINDS)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_attribution_patching_is_the_first_order_estimate_transformer_lens_hooks_give(tmp_path, family: str) -> None:
    """The estimate as Nanda's attribution patching computes it with TransformerLens's forward and backward hooks:
    (clean − corrupted activation) · the gradient of the logit difference in the corrupted run, summed."""
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    estimated = attribution_patching(runner, CLEAN, CORRUPTED, " fox", " dog")
    assert estimated.estimated and estimated.complete
    assert all(parameter.grad is None for parameter in runner.model.parameters())  # the shared model: untouched

    reference = reference_of(family, runner.model).eval()
    tokenizer = runner.text.tokenizer
    clean_ids, corrupted_ids = (torch.tensor([tokenizer(t)["input_ids"]]) for t in (CLEAN, CORRUPTED))
    a, b = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" fox", " dog"))
    _, clean_cache = reference.run_with_cache(clean_ids)
    names = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
             "head_out": "attn.hook_z"}
    values, grads = {}, {}
    for layer in range(2):
        for name in names.values():
            full = f"blocks.{layer}.{name}"
            reference.add_hook(full, lambda act, hook: values.__setitem__(hook.name, act.detach()), "fwd")
            reference.add_hook(full, lambda grad, hook: grads.__setitem__(hook.name, grad.detach()), "bwd")
    logits = reference(corrupted_ids)
    (logits[0, -1, a] - logits[0, -1, b]).backward()
    reference.reset_hooks()
    for kind, name in names.items():
        change = [((clean_cache[f"blocks.{layer}.{name}"] - values[f"blocks.{layer}.{name}"])
                   * grads[f"blocks.{layer}.{name}"])[0] for layer in range(2)]  # (pos, d) or (pos, heads, d_head)
        summed = [c.sum(dim=(0, 2)) if kind == "head_out" else c.sum(dim=-1) for c in change]
        expected = estimated.corrupted + torch.stack(summed).numpy()
        np.testing.assert_allclose(estimated.results[kind], expected, atol=5e-5, err_msg=kind)
    exact = patch(runner, CLEAN, CORRUPTED, " fox", " dog")
    assert np.corrcoef(exact.results["head_out"].ravel(), estimated.results["head_out"].ravel())[0, 1] > 0.5
