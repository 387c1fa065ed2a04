"""Step-by-step generation (model/core/generation/decoding.py, sampling.py and the per-kind steppers): the same tokens
as the runners' own greedy output, rows equal to a full pass over the final sequence, the KV cache equal to re-reading
the whole sequence, seeded sampling reproducible, bad settings explained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.core.generation.decoding import Step, generate
from attention_atlas.model.core.generation.sampling import (
    MAX_NEW_TOKENS,
    DecodeSettings,
    choose_next,
    next_distribution,
)
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.heads import ATTENTION
from attention_atlas.model.registry import load_runner

DATE = "14 feb 1999"
PROMPT = "The capital of France is"


def _greedy(logits: torch.Tensor, step: int) -> int:
    return choose_next(logits, DecodeSettings(), step)


def _steps(runner, text: str, n: int, options: RunOptions = RunOptions(), choose=_greedy) -> tuple[list[Step], object]:
    stepper = runner.stepper(text, options)
    return list(generate(stepper, [], n, choose)), stepper


@pytest.fixture(scope="module")
def smollm2():
    return load_runner("smollm2")


# -- settings --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("settings", "words"), [
    (DecodeSettings(max_new=0), "between 1 and 64"),
    (DecodeSettings(max_new=MAX_NEW_TOKENS + 1), "between 1 and 64"),
    (DecodeSettings(greedy=False, top_k=-1), "Top-k must be at least 1"),
    (DecodeSettings(greedy=False, top_p=0.0), "Top-p must be above 0"),
    (DecodeSettings(greedy=False, top_p=1.5), "Top-p must be above 0"),
])
def test_bad_settings_are_explained(settings: DecodeSettings, words: str) -> None:
    assert any(words in problem for problem in settings.problems())


def test_good_settings_have_no_problem_and_a_cold_temperature_is_greedy() -> None:
    assert DecodeSettings(greedy=False, top_k=5, top_p=0.9, max_new=MAX_NEW_TOKENS).problems() == []
    cold = DecodeSettings(greedy=False, temperature=0.0)
    assert cold.is_greedy and cold.problems() == []
    logits = torch.randn(50)
    assert all(choose_next(logits, cold, i) == int(logits.argmax()) for i in range(5))


def test_top_k_and_top_p_keep_only_the_likely_tokens() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    top_k = next_distribution(logits, DecodeSettings(greedy=False, top_k=2))
    assert torch.allclose(top_k, torch.tensor([0.625, 0.375, 0, 0]))
    top_p = next_distribution(logits, DecodeSettings(greedy=False, top_p=0.8))  # 0.5 + 0.3 reach 0.8
    assert torch.allclose(top_p, torch.tensor([0.625, 0.375, 0, 0]))
    tiny_p = next_distribution(logits, DecodeSettings(greedy=False, top_p=0.01))  # the top token always stays
    assert torch.equal(tiny_p, torch.tensor([1.0, 0, 0, 0]))
    hot = next_distribution(logits, DecodeSettings(greedy=False, temperature=2.0))
    assert torch.allclose(hot, torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt() / torch.tensor([0.5, 0.3, 0.15, 0.05])
                          .sqrt().sum())


def test_a_fixed_seed_gives_the_same_samples_twice() -> None:
    runner = load_runner("toy-gpt-date")
    settings = DecodeSettings(greedy=False, temperature=3.0, seed=7)

    def sample(s: DecodeSettings) -> list[int]:
        steps, _ = _steps(runner, DATE, 12, choose=lambda logits, i: choose_next(logits, s, i))
        return [step.token_id for step in steps]

    first = sample(settings)
    assert sample(settings) == first
    others = [sample(DecodeSettings(greedy=False, temperature=3.0, seed=seed)) for seed in (8, 9, 10)]
    assert any(other != first for other in others)  # the seed matters (hot sampling: some draw differs)


# -- the same tokens as the runners' own greedy output ---------------------------------------------------
@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date"])
def test_toy_greedy_steps_equal_the_traced_output(model_id: str) -> None:
    runner = load_runner(model_id)
    steps, stepper = _steps(runner, DATE, 64)
    assert stepper.decode([s.token_id for s in steps]) == runner.run(DATE).output_text == "1999-02-14"
    assert steps[-1].token_id in stepper.eos_ids


@pytest.mark.slow  # SmolLM2 generating, twice
def test_smollm2_greedy_steps_equal_the_overview_continuation(smollm2) -> None:
    trace = smollm2.run(PROMPT, options=RunOptions(hooks=()))
    steps, _ = _steps(smollm2, PROMPT, 8)
    ids = [s.token_id for s in steps]
    assert smollm2.tokenizer.decode(ids) == trace.output_text
    assert ids[0] == int(trace.outputs["top_next_ids"][0])
    assert np.isclose(steps[0].probability, float(trace.outputs["top_next_probs"][0]), atol=1e-5)
    assert steps[0].self_rows.shape == (30, 9, len(trace.ids))  # every query head of every layer


@pytest.mark.parametrize(("model_id", "causal"), [("toy-gpt-date", "off"), ("toy-date", "off"), ("toy-date", "on")])
def test_steps_follow_the_sidebar_mask_as_the_traced_output_does(model_id: str, causal: str) -> None:
    runner = load_runner(model_id)
    options = RunOptions(causal=causal)
    steps, stepper = _steps(runner, DATE, 64, options)
    assert stepper.decode([s.token_id for s in steps]) == runner.run(DATE, options=options).output_text


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("causal", ["auto", "off"])
def test_hf_causal_lm_steps_equal_the_traced_continuation(runners, family: str, causal: str) -> None:
    runner = runners[family]
    options = RunOptions(hooks=(), causal=causal)
    trace = runner.run("the cat sat", options=options)
    steps, _ = _steps(runner, "the cat sat", 8, options)
    assert runner.tokenizer.decode([s.token_id for s in steps]) == trace.output_text


# -- each step's rows are rows of a full pass over the final sequence ------------------------------------
@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date"])
def test_toy_rows_equal_a_full_trace_of_the_final_sequence(model_id: str) -> None:
    runner = load_runner(model_id)
    steps, stepper = _steps(runner, DATE, 64)
    answer = stepper.decode([s.token_id for s in steps])
    trace = runner.run(DATE, target=answer)  # teacher-forced: the whole final sequence in one pass
    first = len(stepper.context) - 1  # the query that chose the first generated token
    for i, step in enumerate(steps):
        q = first + i
        for layer in range(step.self_rows.shape[0]):
            full = trace.pattern("decoder.attn", layer)[:, q, : q + 1]  # (heads, context)
            np.testing.assert_allclose(step.self_rows[layer].astype(np.float16), full, atol=1e-3)
            if step.cross_rows is not None:
                cross = trace.pattern("decoder.cross_attn", layer)[:, q]
                np.testing.assert_allclose(step.cross_rows[layer].astype(np.float16), cross, atol=1e-3)


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart"])
def test_hf_rows_equal_output_attentions_of_the_final_sequence(runners, family: str) -> None:
    runner = runners[family]
    steps, stepper = _steps(runner, "the cat sat", 6)
    model, ids = runner.model, [*stepper.context, *[s.token_id for s in steps]]
    model.set_attn_implementation("eager")  # the reference: transformers' own probabilities
    try:
        with torch.inference_mode():
            if stepper.source:
                out = model(input_ids=torch.tensor([stepper.source]), decoder_input_ids=torch.tensor([ids]),
                            output_attentions=True)
                selfs, crosses = out.decoder_attentions, out.cross_attentions
            else:
                selfs, crosses = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions, None
    finally:
        model.set_attn_implementation(ATTENTION)
    first = len(stepper.context) - 1
    for i, step in enumerate(steps):
        q = first + i
        full = torch.stack([a[0, :, q, : q + 1] for a in selfs]).numpy()  # (layers, heads, context)
        np.testing.assert_allclose(step.self_rows.astype(np.float16), full, atol=1e-3)
        if crosses is not None:
            cross = torch.stack([a[0, :, q] for a in crosses]).numpy()
            np.testing.assert_allclose(step.cross_rows.astype(np.float16), cross, atol=1e-3)


# -- the KV cache ----------------------------------------------------------------------------------------
def _cache_against_recompute(runner, text: str, n: int) -> None:
    cached = list(generate(runner.stepper(text, RunOptions()), [], n, _greedy))
    full = list(generate(runner.stepper(text, RunOptions(), use_cache=False), [], n, _greedy))
    assert [s.token_id for s in cached] == [s.token_id for s in full]
    for a, b in zip(cached, full, strict=True):
        np.testing.assert_allclose(a.self_rows, b.self_rows, atol=1e-5)
        assert abs(a.probability - b.probability) < 1e-5


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_kv_cache_gives_the_tokens_and_rows_of_recomputing(runners, family: str) -> None:
    _cache_against_recompute(runners[family], "the cat sat on", 10)


@pytest.mark.slow  # SmolLM2 generating, with and without its cache
def test_kv_cache_on_smollm2(smollm2) -> None:
    _cache_against_recompute(smollm2, PROMPT, 6)


def test_a_forced_token_restarts_the_cache(runners) -> None:
    """A branch the cache has not seen (a forced token after a longer run) is read from the start."""
    runner = runners["llama"]
    stepper = runner.stepper("the cat sat", RunOptions())
    first = list(generate(stepper, [], 4, _greedy))
    forced = [first[0].token_id, int(first[1].top_ids[1])]
    again = list(generate(stepper, forced, 2, _greedy))
    fresh = list(generate(runner.stepper("the cat sat", RunOptions(), use_cache=False), forced, 2, _greedy))
    assert [s.token_id for s in again] == [s.token_id for s in fresh]
    np.testing.assert_allclose(again[-1].self_rows, fresh[-1].self_rows, atol=1e-5)


def test_an_encoder_does_not_generate(runners) -> None:
    with pytest.raises(ValueError, match="does not generate"):
        runners["bert"].stepper("the cat sat", RunOptions())


def test_two_threads_stepping_on_one_shared_model_see_only_their_own_rows(runners) -> None:
    """Two sessions generating at once on one loaded model: each gets what it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    runner, texts = runners["llama"], ["the cat sat", "a dog ran on the mat"]

    def rows(text: str) -> list[np.ndarray]:
        return [s.self_rows for s in generate(runner.stepper(text, RunOptions()), [], 8, _greedy)]

    alone = [rows(text) for text in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(rows, texts * 3))
    for i, got in enumerate(together):
        expected = alone[i % 2]
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
