"""Training runs in the server: one per session, at most MAX_TRAININGS at once in the server, each taking the
model-run slots in turns with people's runs (ui/run_scheduler.py) and stopping once its session has ended, paused
or not."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attention_atlas.model.core.devices import pick_device
from attention_atlas.model.toy.live import Limits, LiveTraining
from attention_atlas.model.toy.train import Recipe
from attention_atlas.ui.run_scheduler import run_slots

TRAINING = "train_run"  # session key of this session's LiveTraining (running or done)
MAX_TRAININGS = 2  # trainings running at once in the server (2 cores: a third would only slow the others)
GONE_AFTER_S = 30.0  # a session away this long (its tab closed, not a moment's reconnect) stops its training
LIMITS = Limits()


class Trainings:
    """The server's trainings: at most `most` not done at once (a paused one counts), counted and joined under one
    lock, so that two sessions starting at the same moment cannot both take the last place."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._lock = threading.Lock()
        self._all: weakref.WeakSet[LiveTraining] = weakref.WeakSet()  # a done one goes with its session

    def start(self, make: Callable[[], LiveTraining]) -> LiveTraining:
        """The training `make` starts, made and counted under the lock. ValueError, in words, when `most` run."""
        with self._lock:
            if sum(not training.done for training in self._all) >= self.most:
                raise ValueError(f"The server is running {self.most} trainings, its most at once. Try again when "
                                 "one has finished.")
            training = make()
            self._all.add(training)
            return training


@st.cache_resource(show_spinner=False)
def _trainings() -> Trainings:
    """Every session's trainings, shared by the server."""
    return Trainings(MAX_TRAININGS)


def connected_lately(connected: Callable[[], bool], grace_s: float) -> Callable[[], bool]:
    """False once `connected()` has said False for `grace_s` on end (asked from the training's thread)."""
    seen = [time.monotonic()]

    def alive() -> bool:
        if connected():
            seen[0] = time.monotonic()
        return time.monotonic() - seen[0] < grace_s

    return alive


def session_alive() -> Callable[[], bool]:
    """For the training thread: False once this session has been gone for GONE_AFTER_S (always True where no
    Streamlit server runs, as under AppTest)."""
    context = get_script_run_ctx()
    if context is None or not Runtime.exists():
        return lambda: True
    runtime, session_id = Runtime.instance(), context.session_id
    return connected_lately(lambda: runtime.is_active_session(session_id), GONE_AFTER_S)


def current_training() -> LiveTraining | None:
    return st.session_state.get(TRAINING)


def start_training(recipe: Recipe, snapshot_every: int, device: str) -> LiveTraining:
    """Start this session's training. ValueError, in words, when it cannot: one is running here already, the
    server runs MAX_TRAININGS, or the recipe is outside the limits."""
    mine = current_training()
    if mine is not None and not mine.done:
        raise ValueError("This session is training a model already: stop it first.")
    alive = session_alive()  # here: the script's thread knows its session
    training = _trainings().start(lambda: LiveTraining(recipe, snapshot_every, pick_device(device), LIMITS,
                                                       slot=run_slots, alive=alive))
    st.session_state[TRAINING] = training
    return training


def forget_training() -> None:
    """Let go of this session's finished training (its models stay listed where they were opened)."""
    training = st.session_state.pop(TRAINING, None)
    if training is not None:
        training.stop()
