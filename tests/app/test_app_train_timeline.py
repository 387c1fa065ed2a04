"""The Train page's timeline of snapshots: it follows the newest while the person leaves it there (through
thinnings, and a run cut short), plays round, and stays where the person or the play left it."""

from __future__ import annotations

import time

from attention_atlas.model.toy.live import Limits
from tests.app.train_page import run, start, train_page, until_done


def test_the_timeline_follows_the_newest_snapshot_through_thinnings(monkeypatch) -> None:
    """Past the limit every other snapshot is let go: the slider still shows the steps kept, at the newest one
    (a slider keeps its value's position among its options, so a thinned one must not point at another step)."""
    monkeypatch.setattr("attention_atlas.ui.training_runs.LIMITS", Limits(max_snapshots=4))
    at = train_page()
    training = start(at, 20_000, 10)
    deadline = time.monotonic() + 300
    while training.step < 150:
        assert time.monotonic() < deadline, "not 150 steps in 300 s"
        run(at)
    training.stop()
    until_done(at, training)
    steps = [s.step for s in training.snapshots]
    assert len(steps) <= 5 and training.snapshot_every > 10  # thinned
    slider = at.select_slider[0]
    assert list(slider.options) == [str(step) for step in steps] and slider.value == steps[-1]
    assert f"Every head at step {steps[-1]:,}: click one to draw it large." in [c.value for c in at.caption]


def test_the_timeline_follows_after_a_cut_short_run_plays_round_and_stays_where_the_play_stopped() -> None:
    """A run cut short after the slider's value was written but before the step drawn was (a click during a redraw:
    planted here) does not read as the person letting go of the newest snapshot; the play switch steps through every
    snapshot and round again, and the slider stays where the play stopped until the person moves it."""
    at = train_page()
    training = start(at, 150, 50)
    until_done(at, training)
    slider = lambda: at.select_slider[0]  # noqa: E731
    at.session_state[slider().key] = 0  # what the cut-short run wrote while step 0 was the only snapshot
    run(at)
    assert slider().value == 150
    at.toggle(key="train_play").set_value(True)
    played = [run(at) and slider().value for _ in range(5)]
    assert played == [0, 50, 100, 150, 0]
    assert "Every head at step 0: click one to draw it large." in [c.value for c in at.caption]
    at.toggle(key="train_play").set_value(False)
    run(at)
    run(at)
    assert slider().value == 0  # where the play stopped
    slider().set_value(150)  # the person takes it to the newest: it follows again
    run(at)
    at.session_state[slider().key] = 0
    run(at)
    assert slider().value == 150


def test_a_new_training_follows_its_newest_snapshot_wherever_the_last_one_was_left() -> None:
    at = train_page()
    first = start(at, 100, 50)
    until_done(at, first)
    at.select_slider[0].set_value(50)  # let go of the newest
    run(at)
    at.button(key="train_new").click()
    run(at)
    second = start(at, 150, 50)
    until_done(at, second)
    assert at.select_slider[0].value == 150
