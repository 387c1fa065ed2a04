"""Training runs in the server: one per session, at most MAX_TRAININGS at once in the server, each taking the
model-run slots in turns with people's runs (ui/run_scheduler.py) and stopping once its session has ended."""

from __future__ import annotations

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


@st.cache_resource(show_spinner=False)
def _trainings() -> weakref.WeakSet:
    """Every session's LiveTraining, shared by the server (a finished one is let go with its session)."""
    return weakref.WeakSet()


def running_elsewhere() -> int:
    return sum(not training.done for training in _trainings())


def session_alive() -> Callable[[], bool]:
    """For the training thread: False once this session has been gone for GONE_AFTER_S (always True where no
    Streamlit server runs, as under AppTest)."""
    context = get_script_run_ctx()
    if context is None or not Runtime.exists():
        return lambda: True
    runtime, session_id, seen = Runtime.instance(), context.session_id, [time.monotonic()]

    def alive() -> bool:
        if runtime.is_active_session(session_id):
            seen[0] = time.monotonic()
        return time.monotonic() - seen[0] < GONE_AFTER_S

    return alive


def current_training() -> LiveTraining | None:
    return st.session_state.get(TRAINING)


def start_training(recipe: Recipe, snapshot_every: int, device: str) -> LiveTraining:
    """Start this session's training. ValueError, in words, when it cannot: one is running here already, the
    server runs MAX_TRAININGS, or the recipe is outside the limits."""
    mine = current_training()
    if mine is not None and not mine.done:
        raise ValueError("This session is training a model already: stop it first.")
    if running_elsewhere() >= MAX_TRAININGS:
        raise ValueError(f"The server is running {MAX_TRAININGS} trainings, its most at once. Try again when one "
                         "has finished.")
    training = LiveTraining(recipe, snapshot_every, pick_device(device), LIMITS, slot=run_slots,
                            alive=session_alive())
    _trainings().add(training)
    st.session_state[TRAINING] = training
    return training


def forget_training() -> None:
    """Let go of this session's finished training (its models stay listed where they were opened)."""
    training = st.session_state.pop(TRAINING, None)
    if training is not None:
        training.stop()
