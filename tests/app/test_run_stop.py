"""A run a person stops (ui/run_scheduler.py `stop_button`, ui/trace_cache.py): its waiting ends it as soon as no
script waits for it, another session's wait keeps it going; the session says where it was stopped instead of running
it again, until the person runs it again."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st
from streamlit.testing.v1 import AppTest

from attention_atlas.ui import run_scheduler
from attention_atlas.ui.page import REQUEST
from attention_atlas.ui.run_scheduler import STOPPED, RunProgress, Waiters, stop_run
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE


def test_a_stopped_run_ends_once_no_script_waits_and_not_before(monkeypatch) -> None:
    monkeypatch.setattr(run_scheduler, "ABANDON_AFTER_S", 60.0)  # the stop, not the wait, must end it
    waiters, key = Waiters(), ("a long run",)
    progress = RunProgress(lambda: waiters.abandoned(key))
    progress.report(2.5, 4)
    with waiters.running(key):
        with waiters.waiting(key):  # this session's script
            with waiters.waiting(key):  # another session's, waiting for the same run
                stop_run(key, progress, waiters)
            assert not waiters.abandoned(key)  # this script still waits (its rerun has not begun)
        assert waiters.abandoned(key)  # nobody waits: at once, not after ABANDON_AFTER_S
        assert st.session_state[STOPPED][key] == "Attention layer 3 of 4"
    with waiters.running(key):  # run again later: the stop was that run's
        with waiters.waiting(key):
            pass
        assert not waiters.abandoned(key)
    del st.session_state[STOPPED]


def test_a_session_shows_where_its_run_was_stopped_until_it_runs_it_again(monkeypatch, toy_runs) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")  # nothing kept: the run is not in the cache when asked again
    at = AppTest.from_file("../../app.py", default_timeout=60)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    request = at.session_state[REQUEST]
    key = (request, replace(request.options(), summarised=True))  # the frame's run (ui/runs.py trace_for)
    runs = len(toy_runs)
    at.session_state[STOPPED] = {key: "Attention layer 2 of 3"}
    at.run()
    assert not at.exception
    assert any("The run was stopped at attention layer 2 of 3." in info.value for info in at.info)
    assert len(toy_runs) == runs  # not run again
    at.button(key="run_again").click().run()
    assert not at.exception and len(toy_runs) == runs + 1
    assert not any("stopped" in info.value for info in at.info)
    assert at.code[0].value == "hello world"  # the Overview shows the run
