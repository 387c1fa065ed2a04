"""Training: the schedules, a few steps end to end, the command line, and what it saves loads back as the same
model."""

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from attention_atlas.cli import main
from attention_atlas.model.registry import load_runner
from attention_atlas.model.scratch.transformer import build_model
from attention_atlas.model.toy import train as train_module
from attention_atlas.model.toy.evaluate import exact_match
from attention_atlas.model.toy.settings import TrainSettings
from attention_atlas.model.toy.store import load_toy_folder, save_toy
from attention_atlas.model.toy.tasks import TASKS, make_examples
from attention_atlas.model.toy.train import (
    VALIDATION_SEED,
    Optimising,
    batch_result,
    learning_rate,
    recipe_for,
    train,
)

pytestmark = pytest.mark.training  # training, most tests training a model: make test runs them, make check does not


def test_the_paper_schedule_is_its_formula() -> None:
    """lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5) (Vaswani et al. 2017, §5.3), here scaled to
    peak at peak_lr: with peak_lr = (d_model · warmup)^-0.5 the two are the same number at every step."""
    d_model, warmup = 512, 4000
    settings = TrainSettings(peak_lr=(d_model * warmup) ** -0.5, warmup=warmup, schedule="paper")
    for step in (1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000):
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert learning_rate(step, settings) == pytest.approx(paper, rel=1e-12)


def test_the_constant_schedule_is_constant() -> None:
    settings = TrainSettings(peak_lr=1e-3, schedule="constant")
    assert {learning_rate(step, settings) for step in (1, 100, 10_000)} == {1e-3}


def test_a_few_steps_lower_the_loss_and_save_round_trip(tmp_path: Path) -> None:
    recipe = recipe_for("gpt-date")
    toy = train(replace(recipe, settings=TrainSettings(steps=30, eval_every=15, validation_size=4, batch_size=16)))
    assert toy.training["steps"] == 30
    pairs = make_examples(TASKS["gpt-date"], 16, seed=5)
    fresh = train(replace(recipe, settings=TrainSettings(steps=1, eval_every=100, validation_size=1)))
    with torch.no_grad():
        assert batch_result(toy, pairs, 0.0).loss < batch_result(fresh, pairs, 0.0).loss
    loaded = load_toy_folder(save_toy(toy, tmp_path / "trained"))
    for (name, a), b in zip(toy.model.state_dict().items(), loaded.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert loaded.training == toy.training


@pytest.mark.parametrize("task", ["reverse", "induction"])
def test_a_seed_trains_what_torchs_own_generator_trained_and_leaves_it_alone(task: str, monkeypatch) -> None:
    """A training draws from a generator of its own: the initial weights are the ones `torch.manual_seed(seed)` then
    `build_model` give, and a few steps with dropout (reverse) the same weights as with torch's global generator
    seeded so (the shipped models retrain to the same weights); torch's global generator is neither reseeded nor
    drawn from."""
    recipe = recipe_for(task)
    recipe = replace(recipe, settings=replace(recipe.settings, seed=7, batch_size=8))
    global_state = torch.random.get_rng_state()
    run = Optimising(recipe)
    initial = {name: value.clone() for name, value in run.toy.model.state_dict().items()}
    for _ in range(3):
        run.advance()
    assert torch.equal(torch.random.get_rng_state(), global_state)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        reference = build_model(recipe.config)
        for name, value in reference.state_dict().items():
            assert torch.equal(initial[name], value), name
        torch.manual_seed(7)
        monkeypatch.setattr(train_module, "OwnGenerator", lambda generator: contextlib.nullcontext())
        global_run = Optimising(recipe)  # as the training drew before it had a generator of its own
        for _ in range(3):
            global_run.advance()
    for (name, value), other in zip(run.toy.model.state_dict().items(), global_run.toy.model.state_dict().values(),
                                    strict=True):
        assert torch.equal(value, other), name


def test_one_seed_trains_one_model_in_any_thread_whatever_others_draw() -> None:
    """Two trainings of one seed in two threads at once (with dropout: the reverse task's) reach the same weights as
    one trained alone, while a third thread draws from torch's global generator and reseeds it."""
    recipe = recipe_for("reverse")
    recipe = replace(recipe, settings=replace(recipe.settings, batch_size=16))
    assert recipe.config.dropout > 0

    def trained(into: list) -> None:
        run = Optimising(recipe)
        for _ in range(10):
            run.advance()
        into.append(run.toy.model.state_dict())

    alone: list[dict[str, torch.Tensor]] = []
    trained(alone)
    quiet, results = threading.Event(), []

    def draw() -> None:
        while not quiet.is_set():
            torch.manual_seed(time.monotonic_ns() % 1000)
            torch.rand(256)
            nn.init.xavier_uniform_(torch.empty(64, 64))  # as a model being built elsewhere
            time.sleep(0.0005)

    noise = threading.Thread(target=draw)
    noise.start()
    try:
        pair = [threading.Thread(target=trained, args=(results,)) for _ in range(2)]
        for thread in pair:
            thread.start()
        for thread in pair:
            thread.join(300)
    finally:
        quiet.set()
        noise.join()
    assert len(results) == 2
    for weights in results:
        for name, value in alone[0].items():
            assert torch.equal(weights[name], value), name


def test_command_line_writes_a_folder_the_trace_command_opens(tmp_path: Path, capsys) -> None:
    """`attention-atlas train` (the command's main, in this process)."""
    assert main(["train", "--task", "induction", "--out", str(tmp_path / "mine"), "--steps", "2"]) == 0
    assert "saved" in capsys.readouterr().out
    saved = load_toy_folder(tmp_path / "mine")
    assert saved.model.cfg == recipe_for("induction").config  # the page's defaults
    assert saved.training["steps"] == 2
    runner = load_runner(str(tmp_path / "mine"))
    assert runner.facts.notes["task"] == TASKS["induction"].description
    assert len(runner.run("abcd").output_text) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_both_norm_placements_learn_to_copy(norm: str) -> None:
    """Copy, post-norm (the paper's) or pre-norm, reaches 95% exact match within a small budget: a smaller model
    (d_model 32, one encoder and one decoder layer) than the shipped one, without dropout, at a higher peak rate
    (600 to 900 steps here, 10 to 20 s)."""
    torch.set_num_threads(1)
    recipe = recipe_for("copy")
    recipe = replace(recipe, config=replace(recipe.config, norm=norm, dropout=0.0, d_model=32, d_ff=128,
                                            n_encoder_layers=1, n_decoder_layers=1),
                     settings=replace(recipe.settings, batch_size=32, peak_lr=6e-3, warmup=100))
    run = Optimising(recipe)
    validation = make_examples(TASKS["copy"], 200, VALIDATION_SEED)
    best = 0.0
    while run.step < 1500 and best < 0.95:
        for _ in range(100):
            run.advance()
        if run.step >= 500:  # checked from where it may be there (greedy decoding of 200 examples costs 0.7 s)
            run.toy.model.eval()
            best = max(best, exact_match(run.toy, validation))
    assert best >= 0.95, f"{norm}-norm: {best:.1%} exact after {run.step} steps"
