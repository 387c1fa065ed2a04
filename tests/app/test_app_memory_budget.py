"""The app under a memory budget (ATTENTION_ATLAS_CACHE_MB): a run too large to keep is said so, and works."""

import gc
import json
import weakref

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner
from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.ui.page import PAGES
from attention_atlas.ui.runs import PATTERNS
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE

TOO_LARGE = "too large to keep"
ATTENTION_VIEWS = ["Model view", "One head", "All heads of this layer", "Token lines", "Head statistics", "Rollout",
                   "Compare"]


def _infos(at: AppTest) -> list[str]:
    return [el.value for el in at.info]


def _toy_copy() -> AppTest:
    """The app on toy-copy (it opens on MiniLM, whose sentence toy-copy cannot read: it shows 'hello world')."""
    at = AppTest.from_file("../../app.py", default_timeout=60)
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


@pytest.fixture
def toy_traces(monkeypatch) -> list[weakref.ref]:
    """Weak references to every trace a toy model makes during the test, in order."""
    traces: list[weakref.ref] = []
    real_run = ToyRunner.run

    def recording_run(self, *args, **kwargs):
        trace = real_run(self, *args, **kwargs)
        traces.append(weakref.ref(trace))
        return trace

    monkeypatch.setattr(ToyRunner, "run", recording_run)
    return traces


def test_a_trace_let_go_of_is_freed(monkeypatch, toy_traces) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")
    at = _toy_copy()
    at.switch_page("app_pages/attention.py").run()
    gc.collect()  # what the app does on its next eviction: earlier reruns' page namespaces are garbage cycles
    assert not at.exception
    assert toy_traces and all(trace() is None for trace in toy_traces)  # the session does not hold its run's trace


def test_a_session_holds_its_trace_weakly_so_another_session_can_evict_it(monkeypatch, toy_traces) -> None:
    size = load_runner("toy-copy").run("hello world", None, RunOptions(hooks=PATTERNS)).nbytes
    monkeypatch.setenv(BUDGET_VARIABLE, str(1.5 * size / 2**20))  # one toy-copy trace fits, two do not
    first = _toy_copy()
    held = toy_traces[-1]
    assert not any(TOO_LARGE in info for info in _infos(first))
    assert held() is not None  # cached
    other = _toy_copy()
    other.sidebar.text_input(key="text").set_value("hello earth").run()
    assert not other.exception
    gc.collect()
    assert held() is None  # evicted, and the first session (idle) does not keep it alive
    first.switch_page("app_pages/attention.py").run()  # the first session goes on: its run is made again
    assert not first.exception
    assert first.session_state["trace"].tokens == [*"hello world", "</s>"]


def test_no_page_keeps_its_trace_once_the_run_is_over(monkeypatch, toy_traces) -> None:
    """What a page hands to Streamlit and Streamlit keeps after the run (a download's table maker, a widget's
    format_func) must not hold the page's globals, which hold its trace (ui/downloads.py)."""
    monkeypatch.setenv(BUDGET_VARIABLE, "0.001")  # nothing cached: only the session could keep a trace alive
    kept = _keep_download_makers(monkeypatch)
    at = _toy_copy()
    for page in (page for page in PAGES if page.shows_run):  # Train never reads a trace
        at.switch_page(page.path)
        views = ATTENTION_VIEWS if page.path.endswith("attention.py") else [None]
        for view in views:
            kept.clear()  # the server keeps the makers of the session's last run
            if view is not None:
                at.session_state["view"] = view
                at.query_params["view"] = view  # the tabs are bound to the URL, which wins over the state
            at.run()
            if page.path.endswith("generate.py"):  # its figures (and downloads) come with a generated token
                at.button(key="generate_step").click().run()
            if page.path.endswith("ablation.py"):  # its figures come with chosen heads, and with a scan
                at.toggle(key="ablation_every").set_value(True).run()
                at.button(key="ablation_scan_button").click().run()
            assert not at.exception
            assert kept, f"{page.path} {view or ''}: no download button"
            gc.collect()  # earlier reruns' page namespaces are garbage cycles (ui/trace_cache.py)
            alive = [trace for trace in toy_traces if trace() is not None]
            assert alive == [], f"{page.path} {view or ''}: a trace outlives its run"


def _keep_download_makers(monkeypatch) -> list:
    """Keep what every download button is given, as the server does for a session (AppTest has no server: its
    download buttons drop a callable)."""
    kept: list = []
    real_button = st.download_button

    def keeping_button(label, data, *args, **kwargs):
        kept.append(data)
        return real_button(label, data, *args, **kwargs)

    monkeypatch.setattr(st, "download_button", keeping_button)
    return kept
