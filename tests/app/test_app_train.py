"""The Train page without a browser: a short training driven through the page (the loss falls, the curves, the
timeline and the heads render), the model it makes opening on the Attention page, the controls, bad input, and the
server's trainings (the limit at once, sessions that go)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import numpy as np
import pytest

from attention_atlas.model.toy.live import ASK_EVERY_S
from attention_atlas.ui.page import PAGES
from attention_atlas.ui.session_models import MAX_SESSION_MODELS
from attention_atlas.ui.training_runs import MAX_TRAININGS, Trainings, connected_lately
from tests.app.train_page import PAGE, run, start, train_page, until_done
from tests.plotly_specs import chart_specs
from tests.waiting import until


@pytest.fixture
def server(monkeypatch) -> list[list[bool]]:
    """A server of its own for the test's trainings, whose sessions the test ends: one [connected] flag per training
    started, in order."""
    trainings = Trainings(MAX_TRAININGS)
    monkeypatch.setattr("attention_atlas.ui.training_runs._trainings", lambda: trainings)
    sessions: list[list[bool]] = []

    def session_alive() -> Callable[[], bool]:
        connected = [True]
        sessions.append(connected)
        return lambda: connected[0]

    monkeypatch.setattr("attention_atlas.ui.training_runs.session_alive", session_alive)
    return sessions


def test_a_short_training_falls_renders_and_opens_on_the_attention_page() -> None:
    at = train_page()
    assert at.selectbox(key="train_task").value == "induction"
    training = start(at, 300, 50)
    until_done(at, training)
    assert training.status == "finished"
    losses = np.array(training.losses)
    assert losses[-30:].mean() < 0.8 * losses[:30].mean()  # the loss fell
    assert [s.step for s in training.snapshots] == [0, 50, 100, 150, 200, 250, 300]
    assert at.select_slider[0].value == 300  # following the newest
    assert "finished · step 300 of 300" in at.get("progress")[0].proto.text
    charts = at.get("vega_lite_chart")
    assert len(charts) == 3  # loss, token accuracy, the scores over the steps
    assert "Every head at step 300: click one to draw it large." in [c.value for c in at.caption]
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(at)]
    assert titles[0] == ""  # the grid's: its caption says the step, so no title crowds the "head" axis's
    best = training.snapshots[-1].scores[("induction", "decoder.attn")]
    layer, head = np.unravel_index(int(best.argmax()), best.shape)
    assert titles[1] == f"layer {layer} · head {head} at step 300 · induction score {best.max():.2f}"
    at.select_slider[0].set_value(100)
    run(at)
    assert "Every head at step 100: click one to draw it large." in [c.value for c in at.caption]
    assert at.select_slider[0].value == 100  # no longer following
    at.button(key="train_open_snapshot").click()
    run(at)
    snapshot_id = at.sidebar.selectbox(key="model_id").value
    assert snapshot_id.startswith("trained-induction-step100-")
    at.button(key="train_open_final").click()
    run(at)
    final_id = at.sidebar.selectbox(key="model_id").value
    assert final_id.startswith("trained-induction-") and final_id != snapshot_id
    assert at.sidebar.text_input(key="text").value == "qwertyuiop"  # the task's own example
    at.switch_page("app_pages/attention.py")
    run(at)
    request = at.session_state["run_request"]
    assert request.model_id == final_id and request.text == "qwertyuiop"
    assert any(spec["layout"]["title"]["text"].startswith("decoder self-attention") for spec in chart_specs(at))
    for page in (page for page in PAGES if page.shows_run):  # like any other model, on every page
        at.switch_page(page.path)
        run(at)
        assert not at.error and at.session_state["run_request"].model_id == final_id, page.path
    at.switch_page(PAGE)
    run(at)
    at.select_slider[0].set_value(100)
    at.button(key="train_compare").click()
    run(at)  # to the Attention page's Compare view: the trained model against its snapshot
    assert at.session_state["run_request"].model_id == final_id
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(at)]
    assert titles[:2] == [f"A · {final_id}", f"B · {snapshot_id}, reads A's output"]
    at.switch_page(PAGE)
    run(at)
    at.button(key="train_new").click()
    run(at)
    assert at.button(key="train_start")  # the form again, and the models stay listed
    assert any(option.endswith(final_id) for option in at.sidebar.selectbox(key="model_id").options)


def test_pause_resume_and_stop_through_the_page() -> None:
    at = train_page()
    training = start(at, 20_000, 500)
    until(lambda: training.step > 0, 60, "first step")
    at.button(key="train_pause").click()
    run(at)
    assert training.status == "paused"
    assert "paused · step" in at.get("progress")[0].proto.text
    at.button(key="train_resume").click()
    run(at)
    assert training.status == "running"
    at.button(key="train_stop").click()
    run(at)
    until_done(at, training)
    assert training.status == "stopped"
    assert "stopped before its last step" in at.info[0].value
    assert at.button(key="train_open_final")


@pytest.mark.parametrize(("key", "value", "words"), [
    ("train_heads", 3, "d_model (64) must be divisible by n_heads (3)"),
    ("train_heads", 0, "n_heads must be a whole number of at least 1, not 0"),
    ("train_d_model", -64, "d_model must be a whole number of at least 1, not -64"),
    ("train_steps", 50_000, "steps must be from 1 to 20,000, not 50,000"),
    ("train_every", 0, "snapshots must come every 1 step or more, not 0"),
])
def test_bad_input_is_named_and_nothing_is_lost(key: str, value: int, words: str) -> None:
    at = train_page()
    at.number_input(key="train_layers").set_value(3)
    at.number_input(key=key).set_value(value)
    at.button(key="train_start").click()
    run(at)
    assert words in at.error[0].value.replace("\\", "")
    assert "train_run" not in at.session_state
    assert at.number_input(key=key).value == value and at.number_input(key="train_layers").value == 3


def test_a_task_brings_its_own_defaults() -> None:
    at = train_page()
    at.selectbox(key="train_task").set_value("reverse")
    run(at)
    assert at.radio(key="train_norm").value == "post" and at.radio(key="train_schedule").value == "paper"
    assert at.number_input(key="train_steps").value == 3500


def test_a_session_keeps_its_newest_models_and_the_one_it_shows() -> None:
    at = train_page()
    training = start(at, 20, 10)
    until_done(at, training)
    at.button(key="train_open_final").click()
    run(at)
    shown = at.sidebar.selectbox(key="model_id").value
    for _ in range(MAX_SESSION_MODELS + 1):  # more snapshots listed than a session keeps
        at.session_state["train_listed"] = {}  # as if another training's
        at.button(key="train_open_snapshot").click()
        run(at)
        at.sidebar.selectbox(key="model_id").set_value(shown)
        run(at)
    listed = [option for option in at.sidebar.selectbox(key="model_id").options if "trained-" in option]
    assert len(listed) == MAX_SESSION_MODELS and any(option.endswith(shown) for option in listed)


def test_the_sidebars_model_is_not_run_on_the_train_page() -> None:
    """Train draws no run of the sidebar's model: a text it cannot read is news only on the pages that run it."""
    at = train_page()
    at.sidebar.text_input(key="text").set_value("").run()
    assert not at.error and at.button(key="train_start")
    at.switch_page("app_pages/overview.py").run()
    assert "The text is empty" in at.error[0].value


def test_a_new_training_opens_its_own_model() -> None:
    """After "New training", "Open the trained model" opens the new run's model, not the run's before, even where
    the new run's object lives where the old one did (an id() is reused once its object is collected: planted
    here, as the listing a run of the same id() would have left)."""
    at = train_page()
    until_done(at, start(at, 20, 10))
    at.button(key="train_open_final").click()
    run(at)
    first = at.sidebar.selectbox(key="model_id").value
    at.button(key="train_new").click()
    run(at)
    second = start(at, 30, 10)
    until_done(at, second)
    at.session_state["train_listed"] = {(id(second), "final"): first}
    at.button(key="train_open_final").click()
    run(at)
    shown = at.sidebar.selectbox(key="model_id").value
    assert shown != first and at.session_state["session_models"][shown].toy.training["steps"] == 30


def test_two_trainings_at_once_and_sessions_gone_while_paused_make_room(server: list[list[bool]]) -> None:
    """Two sessions train (and pause); a third is told the server is full. Once the two sessions have gone, their
    paused trainings end within seconds and the third starts."""
    sessions = [train_page() for _ in range(MAX_TRAININGS + 1)]
    trainings = [start(at, 20_000, 500) for at in sessions[:MAX_TRAININGS]]
    for at, training in zip(sessions, trainings, strict=False):  # the first two
        until(lambda training=training: training.step > 0, 60, "first step")
        at.button(key="train_pause").click()
        run(at)
        assert training.status == "paused"
    third = sessions[-1]
    third.button(key="train_start").click()
    run(third)
    assert f"The server is running {MAX_TRAININGS} trainings, its most at once" in third.error[0].value
    assert "train_run" not in third.session_state
    for connected in server:
        connected[0] = False
    gone = time.monotonic()
    for training in trainings:
        assert training.join(ASK_EVERY_S + 10), "a paused training goes on after its session"
        assert training.status == "stopped" and training.result is None
    print(f"both ended {time.monotonic() - gone:.2f} s after their sessions")
    started = start(third, 20_000, 500)
    assert started.status == "running"
    started.stop()
    assert started.join(60)


def test_the_limit_is_checked_and_taken_at_once() -> None:
    """Sessions that start at the same moment: exactly MAX_TRAININGS of them train, however slowly one is made."""

    class Made:
        done = False

    def make() -> Made:
        time.sleep(0.05)  # building the model: the others ask meanwhile
        return Made()

    trainings, together = Trainings(MAX_TRAININGS), threading.Barrier(8)

    def start(_: int) -> Made | None:
        together.wait()
        with contextlib.suppress(ValueError):
            return cast(Made, trainings.start(make))  # the stand-in make made (Trainings reads only .done)
        return None

    with ThreadPoolExecutor(8) as pool:
        started = [made for made in pool.map(start, range(8)) if made is not None]
    assert len(started) == MAX_TRAININGS
    started[0].done = True  # one finished: its place is free
    assert trainings.start(make) is not None


def test_a_session_is_gone_once_away_longer_than_its_grace() -> None:
    """A moment's disconnection keeps a training; a session away for the grace ends it."""
    connected = [True]
    alive = connected_lately(lambda: connected[0], 0.3)
    assert alive()
    connected[0] = False
    away = time.monotonic()
    assert alive()  # a reconnect may come
    until(lambda: not alive(), 10, "end of the grace")
    assert time.monotonic() - away >= 0.3
    connected[0] = True
    assert alive()
