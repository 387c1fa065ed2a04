"""The app under a memory budget (ATTENTION_ATLAS_CACHE_MB): a run too large to keep is said so, and works."""

import json
import weakref

from streamlit.testing.v1 import AppTest

from ui.trace_cache import BUDGET_VARIABLE

TOO_LARGE = "too large to keep"


def _infos(at: AppTest) -> list[str]:
    return [el.value for el in at.info]


def _toy_copy() -> AppTest:
    """The app on toy-copy (it opens on MiniLM, whose sentence toy-copy cannot read: it shows 'hello world')."""
    at = AppTest.from_file("../app.py", default_timeout=60)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value("toy-copy").run()
    return at


def test_a_run_larger_than_the_budget_is_said_not_kept_and_the_app_still_works(monkeypatch, toy_runs) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")  # 1 KiB: no trace fits
    calls = toy_runs
    at = _toy_copy()
    assert not at.exception
    assert any(TOO_LARGE in info for info in _infos(at))
    assert at.code[0].value == "hello world"  # the Overview still shows the run
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception
    title = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["title"]["text"]
    assert title == "encoder self-attention: layers × heads"  # derived values computed, just not stored
    runs = len(calls)
    at.selectbox(key="layer").set_value(1 - at.selectbox(key="layer").value).run()
    assert not at.exception
    assert len(calls) == runs + 1  # not kept: a layer change runs the model again, as the message says


def test_a_run_within_the_budget_is_kept_without_a_message(monkeypatch, toy_runs) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "64")
    calls = toy_runs
    at = _toy_copy()
    at.sidebar.text_input(key="text").set_value("kept in budget").run()
    assert not at.exception
    assert not any(TOO_LARGE in info for info in _infos(at))
    runs = len(calls)
    at.radio(key="site").set_value("decoder.cross_attn").run()
    assert not at.exception
    assert len(calls) == runs


def test_a_trace_let_go_of_is_freed(monkeypatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")
    at = _toy_copy()
    at.switch_page("app_pages/attention.py").run()
    first = weakref.ref(at.session_state["trace"])
    at.sidebar.text_input(key="text").set_value("another text").run()
    assert not at.exception
    assert first() is None  # neither the session's state nor an earlier rerun's page namespace holds it
