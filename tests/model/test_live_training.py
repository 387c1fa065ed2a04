"""Training followed live (model/toy/live.py) and the per-head scores (model/toy/head_scores.py): what the Train
page shows, checked on the model layer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch

from attention_atlas.model.toy import train as train_module
from attention_atlas.model.toy.head_scores import probe_scores
from attention_atlas.model.toy.live import ASK_EVERY_S, GONE, Limits, LiveTraining, training_problems
from attention_atlas.model.toy.settings import TrainSettings
from attention_atlas.model.toy.tasks import TASKS
from attention_atlas.model.toy.train import recipe_for
from tests.waiting import until

pytestmark = pytest.mark.training  # training, most tests training a model: make test runs them, make check does not


def _short(task: str, steps: int, **settings) -> object:
    recipe = recipe_for(task)
    return replace(recipe, settings=replace(recipe.settings, steps=steps, **settings))


class Session:
    """An `alive` callable that a test ends, counting the questions the training thread asks it."""

    def __init__(self) -> None:
        self.connected, self.asked = True, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.connected

    def questions(self, more: int) -> Callable[[], bool]:
        """A condition: `more` questions asked since now."""
        target = self.asked + more
        return lambda: self.asked >= target


def _paused(training: LiveTraining, session: Session) -> int:
    """Pause a run once it has stepped, wait until its thread waits (it asks after its session while it does), and
    return the step it holds at."""
    until(lambda: training.step > 0, 60, "first step")
    training.pause()
    assert training.status == "paused"
    until(session.questions(3), 30, "questions while paused")  # the step under way has ended
    held = training.step
    until(session.questions(2), 30, "questions while paused")  # a while later (ASK_EVERY_S each)
    assert training.status == "paused" and training.step == held
    return held


def test_the_induction_score_reads_the_token_after_the_earlier_copy() -> None:
    """For n distinct letters then the same letters (<s> at 0), query q = n+1…2n looks at q − n + 1: the score of a
    pattern that does exactly that is 1, of one that looks at the copy itself (q − n) 0."""
    task = TASKS["induction"]
    n = len(task.probe[0])
    length = 2 * n + 1  # <s>, the letters, the letters again
    scores = {score.name: score for score in probe_scores(task, {"decoder.attn": (length, length)})}
    induction = scores["induction"]
    assert list(induction.queries) == list(range(n + 1, 2 * n + 1))
    exact, copy = np.zeros((1, 2, length, length)), np.zeros((1, 2, length, length))
    exact[0, 0, np.arange(length), 0] = 1.0
    copy[0, 0, np.arange(length), 0] = 1.0
    for q in range(n + 1, 2 * n + 1):
        exact[0, 1, q] = 0.0
        exact[0, 1, q, q - n + 1] = 1.0
        copy[0, 1, q] = 0.0
        copy[0, 1, q, q - n] = 1.0
    assert induction.of(exact)[0, 1] == 1.0 and induction.of(copy)[0, 1] == 0.0
    assert scores["first token"].of(exact)[0, 0] == 1.0


def test_alignment_scores_follow_each_task() -> None:
    """Cross-attention: copy's score looks along the diagonal, reverse's along the anti-diagonal, sort's at the
    place each letter stands in the source."""
    names = {}
    for name in ("copy", "reverse", "sort"):
        task = TASKS[name]
        source, target = task.probe
        scores = probe_scores(task, {"decoder.cross_attn": (len(target) + 1, len(source) + 1)})
        (score,) = scores
        names[name] = score.name
        assert [source[k] for k in score.keys] == list(target)  # each output letter reads its own source letter
    assert names == {"copy": "diagonal", "reverse": "anti-diagonal", "sort": "alignment"}


def test_a_run_records_steps_snapshots_scores_and_its_result() -> None:
    training = LiveTraining(_short("reverse", 40), snapshot_every=10)
    training.join(120)
    assert training.status == "finished" and training.step == 40
    assert [s.step for s in training.snapshots] == [0, 10, 20, 30, 40]
    snapshot = training.snapshots[-1]
    assert set(snapshot.patterns) == {"encoder.attn", "decoder.attn", "decoder.cross_attn"}
    layers, heads = 2, 4
    for patterns in snapshot.patterns.values():
        assert patterns.shape[:2] == (layers, heads)
        np.testing.assert_allclose(patterns.sum(-1), 1.0, atol=1e-5)  # rows of probabilities
    for (name, site), values in snapshot.scores.items():
        score = next(s for s in training.scores if (s.name, s.site) == (name, site))
        np.testing.assert_array_equal(values, score.of(snapshot.patterns[site]))
    final = training.result
    assert final.training["steps"] == 40 and not final.model.training  # eval mode
    for name, value in final.model.state_dict().items():  # the last snapshot is the result's weights
        assert torch.equal(value.cpu(), snapshot.weights[name]), name
    again = training.snapshot_model(training.snapshots[0])
    assert not torch.equal(again.model.generator.proj.weight, final.model.generator.proj.weight)


def test_snapshots_are_thinned_to_the_limit() -> None:
    limits = Limits(max_snapshots=4)
    training = LiveTraining(_short("induction", 40), snapshot_every=2, limits=limits)
    training.join(120)
    steps = [s.step for s in training.snapshots]
    assert len(steps) <= 4 + 1 and steps[0] == 0 and steps[-1] == 40
    assert training.snapshot_every > 2


def test_weights_too_large_to_keep_are_not_kept() -> None:
    training = LiveTraining(_short("induction", 4), snapshot_every=2, limits=Limits(snapshot_weight_bytes=1000))
    training.join(60)
    assert all(s.weights is None for s in training.snapshots)
    with pytest.raises(ValueError, match="not kept"):
        training.snapshot_model(training.snapshots[0])
    assert training.result is not None  # the final model is kept all the same


def test_pause_resume_and_stop() -> None:
    session = Session()
    training = LiveTraining(_short("induction", 20_000), snapshot_every=500, alive=session)
    paused_at = _paused(training, session)
    training.resume()
    until(lambda: training.step > paused_at, 60, "step after resuming")
    training.stop()
    assert training.join(60)
    assert training.status == "stopped" and training.result is not None
    assert training.message == "stopped before its last step"
    assert training.snapshots[-1].step == training.step  # the timeline ends at the result


@pytest.mark.parametrize("paused", [True, False], ids=["paused", "running"])
def test_a_run_whose_session_goes_stops_within_seconds(paused: bool) -> None:
    """Paused or running, the thread ends once its session is gone, with no result (nobody to show it to)."""
    session = Session()
    training = LiveTraining(_short("induction", 20_000), snapshot_every=500, alive=session)
    if paused:
        _paused(training, session)
    else:
        until(lambda: training.step > 0, 60, "first step")
    session.connected = False
    gone = time.monotonic()
    assert training.join(ASK_EVERY_S + 10), "the thread goes on after its session"
    assert (training.status, training.message) == GONE and training.result is None
    print(f"ended {time.monotonic() - gone:.2f} s after its session ({'paused' if paused else 'running'})")


def test_a_pause_as_the_run_ends_leaves_it_ended() -> None:
    """Status changes take one lock: a pause checked while the run still ran, written as the thread ends it, must
    not leave it paused for ever (and counted against the server's trainings). The pause is held between its check
    and its write until the run has stepped its last and had a while to end (without the lock, it would have)."""
    steps = 100
    training = LiveTraining(_short("induction", steps, batch_size=8), snapshot_every=50)
    until(lambda: training.step > 0, 60, "first step")

    class HeldClear(threading.Event):
        held = False

        def clear(self) -> None:
            until(lambda: training.step == steps, 60, "last step")
            training.join(2.0)
            self.held = True
            super().clear()

    running = HeldClear()
    running.set()
    training._running = running  # the one way to stall pause() between its check and its write
    training.pause()
    assert running.held  # the pause was checked while the run ran
    assert training.join(60)
    assert training.status == "finished" and training.result is not None


def test_the_run_slot_is_held_whenever_the_model_computes(monkeypatch) -> None:
    """The first snapshot, the steps, the last snapshot (after a stop between snapshots) and the evaluation all run
    under the slot; it is let go between chunks of steps."""
    held: list[bool] = []
    outside: list[str] = []
    holds = [0]

    @contextlib.contextmanager
    def slot() -> Iterator[None]:
        held.append(True)
        holds[0] += 1
        try:
            yield
        finally:
            held.pop()

    def build_watched(config):  # every computation passes through the decoder stack
        model = build_model(config)
        model.decoder.register_forward_pre_hook(lambda module, args: None if held else outside.append("forward"))
        return model

    build_model = train_module.build_model
    monkeypatch.setattr(train_module, "build_model", build_watched)
    training = LiveTraining(_short("induction", 20_000, batch_size=8), snapshot_every=10_000, slot=slot)
    until(lambda: training.step > 3, 60, "steps")
    training.stop()
    assert training.join(60) and training.status == "stopped" and training.result is not None
    assert [s.step for s in training.snapshots] == [0, training.step]
    assert not outside and not held and holds[0] >= 3  # first snapshot, steps, the end


@pytest.mark.parametrize(("change", "words"), [
    ({"n_heads": 0}, "n_heads must be a whole number of at least 1"),
    ({"n_heads": 3}, "must be divisible by n_heads"),
    ({"d_model": -8}, "d_model must be a whole number of at least 1"),
])
def test_bad_sizes_are_named(change: dict, words: str) -> None:
    recipe = recipe_for("induction")
    with pytest.raises(ValueError, match=words):
        replace(recipe.config, **change)


def test_limits_are_named() -> None:
    recipe = recipe_for("induction")
    limits = Limits()
    too_long = replace(recipe, settings=replace(recipe.settings, steps=limits.max_steps + 1))
    assert training_problems(too_long, 10, limits) == [f"steps must be from 1 to {limits.max_steps:,}, not 20,001"]
    wide = replace(recipe, config=replace(recipe.config, d_model=512, d_ff=2048, n_decoder_layers=8))
    assert "parameters; the most is" in training_problems(wide, 10, limits)[0]
    bad = replace(recipe, settings=TrainSettings(batch_size=0, peak_lr=0.0, label_smoothing=1.0))
    assert len(training_problems(bad, 10, limits)) == 3
    with pytest.raises(ValueError, match="Before it can train: steps must be from 1"):
        LiveTraining(too_long, snapshot_every=10)
    with pytest.raises(ValueError, match="every 1 step or more"):
        LiveTraining(recipe, snapshot_every=0)


@pytest.mark.slow
def test_an_induction_head_forms_at_the_page_defaults() -> None:
    """At the Train page's defaults on this CPU, the best head's induction score rises from below 0.2 to above 0.4
    (the threshold commonly used to call a head an induction head) within the default budget of steps, while the
    loss drops at the same steps. The run stops once a snapshot is above the threshold."""
    torch.set_num_threads(1)
    recipe = recipe_for("induction")
    training = LiveTraining(recipe, snapshot_every=100)

    def best(snapshot) -> float:
        return float(snapshot.scores[("induction", "decoder.attn")].max())

    until(lambda: training.done or any(best(s) > 0.4 for s in training.snapshots), 900, "induction head")
    training.stop()
    assert training.join(120)
    crossing = next(s.step for s in training.snapshots if best(s) > 0.4)  # the first snapshot above
    assert best(training.snapshots[0]) < 0.2
    assert crossing <= recipe.settings.steps
    losses = np.array(training.losses)
    before, at = losses[:100].mean(), losses[crossing - 100 : crossing].mean()
    assert before > 5 * at  # the loss fell on the way there
    print(f"induction score {best(training.snapshots[0]):.2f} at step 0, first above 0.4 at step {crossing}; loss "
          f"{before:.2f} → {at:.3f}; {training.seconds:.0f} s")
