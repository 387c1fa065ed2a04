"""Trace files opened in the app (`attention-atlas --trace FILE`, the Overview's upload: tests/browser): the run shown
is the file's, with its model, text and options; every page and view works on it, reading the file where it holds
what the view draws and the model the file names where it does not; a model this server cannot open is said so on
the views that need it; a file that is not a trace is refused with a sentence and the app keeps working."""

from __future__ import annotations

import gc
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas import load
from attention_atlas.ui.page import TRACE
from attention_atlas.ui.trace_cache import BUDGET_VARIABLE, shared_cache
from attention_atlas.ui.trace_files import FILE_PREFIX, OpenedFile
from attention_atlas.ui.url_state import TRACE_FILE_VARIABLE
from tests.app.app_session import TABBED, open_app_page
from tests.plotly_specs import plotly_array
from tests.tiny_hf import build

PLAIN = ("app_pages/generate.py", "app_pages/ablation.py")


def _opened_on(path: Path, monkeypatch) -> AppTest:
    """A new session of a server started with `--trace path`."""
    monkeypatch.setenv(TRACE_FILE_VARIABLE, str(path))
    at = AppTest.from_file("../../app.py", default_timeout=120).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _trace_bytes(text: str) -> bytes:
    buffer = io.BytesIO()
    load("toy-reverse").run(text, hooks="*").save(buffer)
    return buffer.getvalue()


def _uploaded(name: str, data: bytes) -> AppTest:
    """A new session on the Overview that uploads `data` as `name`."""
    at = open_app_page("app_pages/overview.py", "toy-reverse", "hello")
    at.get("file_uploader")[0].upload(name, data).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _heatmap(at: AppTest):
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return spec["layout"]["title"]["text"], plotly_array(spec["data"][0]["z"])


def _walk_every_page(at: AppTest) -> dict[str, list[str]]:
    """Every page and tab; returns the errors shown on each (none raised)."""
    shown: dict[str, list[str]] = {}
    for page in PLAIN:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception[0].message if at.exception else "")
        shown[page] = [error.value for error in at.error]
    for page, key in TABBED.items():
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception[0].message if at.exception else "")
        shown[page] = [error.value for error in at.error]  # a page that needs the model says so before its tabs
        for view in [tab.label for tab in at.tabs]:
            at.session_state[key] = view
            at.run()
            assert not at.exception, (page, view, at.exception[0].message if at.exception else "")
            shown[f"{page} · {view}"] = [error.value for error in at.error]
    return shown


def test_a_toy_models_trace_file_is_the_run_shown_on_every_page(tmp_path: Path, monkeypatch) -> None:
    trace = load("toy-date").run("march 3 2021", hooks="*")
    trace.save(tmp_path / "date.npz")
    at = _opened_on(tmp_path / "date.npz", monkeypatch)
    assert at.sidebar.selectbox(key="model_id").value.startswith(FILE_PREFIX + "date.npz")
    described = at.sidebar.markdown[0].value  # 12 characters and </s>
    assert described.startswith("A saved run of **toy\\-date** on “march 3 2021” (13 tokens)")
    assert at.subheader[0].value == "Attention Atlas · toy-date"
    assert at.code[0].value == "2021-03-03"  # the file's output
    live = open_app_page("app_pages/overview.py", "toy-date", "march 3 2021")
    assert _heatmap(at)[0] == _heatmap(live)[0]
    assert (_heatmap(at)[1] == _heatmap(live)[1]).all()  # the same head, the same numbers
    assert not any(errors for errors in _walk_every_page(at).values())  # toy-date is here: views that need it run it
    other = _opened_on(tmp_path / "date.npz", monkeypatch)  # another session of that server
    [first], [second] = (list(session.session_state["trace_files"].values()) for session in (at, other))
    assert second == first == OpenedFile(_digest((tmp_path / "date.npz").read_bytes()), first.nbytes,
                                         str(tmp_path / "date.npz"))  # one copy, in the server's cache


def test_a_file_whose_model_is_not_here_shows_its_run_and_says_what_needs_the_model(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    folder = build("llama", tmp_path / "llama")
    load(folder).run("the cat sat on the mat").save(tmp_path / "llama.npz")  # patterns only
    shutil.rmtree(folder)  # made on another machine
    at = _opened_on(tmp_path / "llama.npz", monkeypatch)
    assert not at.error and at.get("plotly_chart")  # the Overview draws the file's head
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception and not at.error and at.get("plotly_chart")  # the model view, from the file
    errors = {where: [error.replace("\\", "") for error in shown] for where, shown in _walk_every_page(at).items()}
    for where in ("app_pages/step_through.py", "app_pages/generate.py", "app_pages/activations.py · Residual stream"):
        assert errors[where] and errors[where][0].startswith("This view runs the model itself, and the trace file "
                                                             f"llama.npz was made by {folder}, which this server "
                                                             "cannot open"), where
    assert not errors["app_pages/attention.py · Head statistics"]
    assert not errors["app_pages/masks.py · Masks of this run"]


def test_a_file_that_is_not_a_trace_is_refused_and_the_app_opens_as_usual(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "notes.npz").write_bytes(b"not a zip at all")
    at = _opened_on(tmp_path / "notes.npz", monkeypatch)
    assert "cannot be opened: notes.npz is not a trace file" in at.error[0].value
    assert not at.sidebar.selectbox(key="model_id").value.startswith(FILE_PREFIX)
    assert at.get("plotly_chart")  # the default model's run


@pytest.mark.parametrize("causal", ["off"])
def test_the_files_masks_are_the_runs_and_a_view_that_reruns_keeps_them(tmp_path: Path, monkeypatch,
                                                                        causal: str) -> None:
    trace = load("toy-gpt-date").run("14 feb 1999", causal=causal)
    trace.save(tmp_path / "off.npz")
    at = _opened_on(tmp_path / "off.npz", monkeypatch)
    assert "causal mask: off" in at.sidebar.markdown[0].value
    at.switch_page("app_pages/masks.py").run()  # its run needs scores: made live, under the file's causal choice
    assert not at.exception and not at.error
    assert at.session_state["run_request"].causal == causal


def test_two_sessions_uploading_files_of_one_name_see_their_own_and_the_same_bytes_are_one_trace() -> None:
    hello, abc = _trace_bytes("hello"), _trace_bytes("abc")
    sessions = [_uploaded("run.npz", data) for data in (hello, abc, hello)]
    for at in sessions:
        at.button(key="overview_trace_open").click().run()
        assert not at.exception and not at.error
    ids = [at.sidebar.selectbox(key="model_id").value for at in sessions]
    assert ids[0] == f"{FILE_PREFIX}run.npz · {_digest(hello)[:8]}" != ids[1]  # same name, other bytes: its own
    assert ids[2] == ids[0]  # the same bytes: the same id, and one trace in the server's cache, under the full hash
    assert [at.code[0].value for at in sessions] == ["olleh", "cba", "olleh"]  # each session sees its own file
    for at, data in zip(sessions, (hello, abc, hello), strict=True):
        assert at.session_state["trace_files"][at.sidebar.selectbox(key="model_id").value] == OpenedFile(
            _digest(data), at.session_state["trace_files"][ids[0] if data == hello else ids[1]].nbytes)
    sessions[0].run()
    assert sessions[0].code[0].value == "olleh"


def test_an_upload_past_its_share_of_the_budget_or_damaged_gets_a_sentence_and_the_app_keeps_working(
        monkeypatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0.4")  # an upload may take a quarter: 0.1 MiB
    at = _uploaded("big.npz", _trace_bytes("hello"))  # 0.2 MiB of arrays
    assert at.error[0].value.replace("\\", "") == ("That file cannot be opened: big.npz holds 0.2 MiB of arrays; this "
                                                  "server opens trace files of up to 0.1 MiB. Save a shorter run, or "
                                                  "fewer hooks.")
    assert not at.get("button") or not any(b.key == "overview_trace_open" for b in at.button)
    assert "trace_files" not in at.session_state or not at.session_state["trace_files"]
    at.get("file_uploader")[0].upload("broken.npz", _trace_bytes("abc")[:5000]).run()
    assert not at.exception
    assert at.error[0].value.replace("\\", "").startswith("That file cannot be opened: broken.npz is not a trace file")
    assert at.get("plotly_chart") and at.subheader[0].value == "Attention Atlas · toy-reverse"  # the app's own run


def test_a_session_keeps_no_uploaded_trace_once_the_servers_cache_lets_go_of_it() -> None:
    at = _uploaded("run.npz", _trace_bytes("hello"))
    at.button(key="overview_trace_open").click().run()
    held = at.session_state[TRACE]  # between runs, the frame's trace held weakly
    assert held.output_text == "olleh"
    shared_cache.clear()  # the cache lets go of every trace
    gc.collect()
    with pytest.raises(ReferenceError):
        held.output_text  # noqa: B018 (nothing else kept it: no session copy outside the budget)
    at.run()
    assert at.info[0].value == "That trace file is no longer open in this session: open it again on the Overview."
