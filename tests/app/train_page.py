"""The Train page in AppTest, as its tests drive it: opened, run, a training started through its form and
waited for."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from attention_atlas.model.toy.live import LiveTraining
from tests.app.app_session import open_app_page

PAGE = "app_pages/train.py"


def train_page() -> AppTest:
    return open_app_page(PAGE, "toy-copy", "hello world")


def run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def start(at: AppTest, steps: int, every: int) -> LiveTraining:
    at.number_input(key="train_steps").set_value(steps)
    at.number_input(key="train_every").set_value(every)
    at.button(key="train_start").click()
    run(at)
    return at.session_state["train_run"]


def until_done(at: AppTest, training: LiveTraining) -> None:
    assert training.join(300)
    assert training.done
    run(at)
