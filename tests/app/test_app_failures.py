"""Failures a shared server meets, without a browser: a model that fails to load, a run that raises, a GPU out of
memory (with and without the CPU to fall back to), and a page's own run failing. The person sees a message, never
a traceback or a server path, and carries on with another model."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from streamlit.testing.v1 import AppTest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.registry import load_runner
from attention_atlas.ui.page import PAGES
from tests.hostile import assert_safe, shown_text

SECRET = "/srv/secret/weights.bin"  # a server path in an error's message: it must not reach the page


def _raising(error: BaseException):
    def run(*args, **kwargs):
        raise error
    return run


def _broken_toy(error: BaseException):
    runner = copy.copy(load_runner("toy-copy"))
    runner.run = _raising(error)  # this copy only: the shared toy-copy stays as it is
    return runner


def _gpu_runner_out_of_memory(folder):
    """A tiny GPT-2 that says it is on a GPU and runs out of memory there (the CPU copy works)."""
    runner = load_hf_runner(str(folder))
    runner.facts = dataclasses.replace(runner.facts, device="cuda:0", precision="bfloat16")  # a GPU's auto precision
    real_run = runner._run

    def run(model, *args):
        if model is runner.model:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_run(model, *args)

    runner._run = run
    return runner


@pytest.fixture
def broken_models(monkeypatch, folders):
    """Model ids that fail in one way each (typed as custom ids); every other id loads as usual."""
    real = load_runner
    makers = {
        "broken-load": _raising(RuntimeError(f"weights at {SECRET} are corrupt")),
        "broken-run": lambda *a, **k: _broken_toy(KeyError(SECRET)),
        "planted-bug": lambda *a, **k: _broken_toy(ValueError(f"operands could not be broadcast ({SECRET})")),
        "broken-oom": lambda *a, **k: _broken_toy(torch.cuda.OutOfMemoryError("CUDA out of memory.")),
        "broken-cpu-memory": lambda *a, **k: _broken_toy(RuntimeError("DefaultCPUAllocator: can't allocate memory")),
        "broken-gpu": lambda *a, **k: _gpu_runner_out_of_memory(folders["gpt2"]),
    }
    monkeypatch.setattr("attention_atlas.ui.runs.load_runner",
                        lambda model_id, *a, **k: makers.get(model_id, real)(model_id, *a, **k))
    return makers


def _on_custom(model_id: str) -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value("custom").run()
    at.sidebar.text_input(key="custom_model").set_value(model_id).run()
    return at


def _message(at: AppTest) -> str:
    return at.error[0].value.replace("\\", "")  # the app backslash-escapes Markdown in messages


@pytest.mark.parametrize(("model_id", "message"), [
    ("broken-load", "Loading broken-load failed (RuntimeError); the details are in the server's log"),
    ("broken-run", "Running broken-run failed (KeyError); the details are in the server's log"),
    ("broken-oom", "Running broken-oom ran out of memory. Try a shorter text"),
    ("broken-cpu-memory", "Running broken-cpu-memory ran out of memory."),
])
def test_a_failure_is_a_message_and_the_app_carries_on(broken_models, model_id: str, message: str) -> None:
    at = _on_custom(model_id)
    for page in PAGES:
        at.switch_page(page.path).run()
        assert_safe(at)
        if page.shows_run or message.startswith("Loading"):
            assert message in _message(at) and SECRET not in shown_text(at)
        else:  # Train does not run the sidebar's model: a run's failure is news only where it runs
            assert not at.error and at.button(key="train_start")
    at.switch_page(PAGES[0].path).run()
    at.sidebar.text_input(key="custom_model").set_value(model_id).run()  # the same again (a rerun): the same message
    assert message in _message(at)
    at.sidebar.selectbox(key="model_id").set_value("toy-reverse").run()
    at.sidebar.text_input(key="text").set_value("abc").run()
    at.switch_page(PAGES[0].path).run()
    assert_safe(at)
    assert at.code[0].value == "cba" and not at.error


def test_a_bug_that_raises_a_valueerror_is_logged_not_shown_as_a_mistake(broken_models, caplog) -> None:
    """A ValueError that is not a UserError (numpy's, a shape mismatch) is a bug: the person reads that something
    went wrong and where the details are; the server's log holds its traceback."""
    with caplog.at_level("ERROR", logger="attention_atlas.ui.runs"):
        at = _on_custom("planted-bug")
    assert_safe(at)
    shown = _message(at)
    assert shown.startswith("Something went wrong: Running planted-bug failed (ValueError); the details are in the "
                            "server's log") and "broadcast" not in shown and SECRET not in shown_text(at)
    logged = [record for record in caplog.records if record.exc_info]  # logged with its traceback
    assert logged and logged[0].exc_info[0] is ValueError and "operands could not be broadcast" in caplog.text
    assert "Traceback (most recent call last)" in caplog.text and "raise error" in caplog.text  # where it came from


def test_out_of_memory_on_the_gpu_reruns_on_the_cpu_and_says_so(broken_models) -> None:
    at = _on_custom("broken-gpu")
    at.sidebar.text_input(key="text").set_value("the quick brown fox").run()
    assert_safe(at)
    assert "The CUDA ran out of memory; this run used the CPU instead." in [w.value for w in at.warning]
    assert at.table[0].value.loc["device", "value"] == "cpu"  # the card says where it ran, and in what
    assert at.session_state["trace"].facts.precision == "float32"
    assert at.get("plotly_chart")


def test_a_page_run_that_fails_shows_why_and_stops_that_page(broken_models) -> None:
    """`ui.page.trace_with` (a page's own run, other hooks) failing: the message, and nothing after it."""
    def page() -> None:
        from types import SimpleNamespace

        import streamlit as st

        from attention_atlas.ui.page import REQUEST, TRACE, trace_with
        from attention_atlas.ui.runs import RunRequest

        # the frame's run worked (its trace: a short text); the page's own run fails
        st.session_state[TRACE] = SimpleNamespace(tokens=["abc"], target_tokens=[])
        st.session_state[REQUEST] = RunRequest("broken-run", "cpu", "abc", None, "auto")
        trace_with(("decoder.0.attn.hook_q",))
        st.write("drawn after a failed run")

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert_safe(at)
    assert "Running broken-run failed (KeyError)" in _message(at)
    assert not at.markdown


def test_a_page_bug_shows_no_message_or_traceback() -> None:
    """An error no code expected (a bug in a page) shows its type only: the server's config redacts the message
    and the traceback, which stay in the server's log (.streamlit/config.toml, client.showErrorDetails)."""
    at = AppTest.from_string(f"raise RuntimeError({SECRET!r})").run()
    assert at.exception, "the error is shown"
    shown = at.exception[0]
    assert SECRET not in shown.message and not shown.stack_trace
