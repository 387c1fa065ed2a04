"""Trace files opened in a session (the Overview's upload, or `attention-atlas --trace FILE` for every new session):
listed in the sidebar's model list as `file:<name>`, each shown as the run it holds, with its model, text and
options. Pages that read only the trace draw it; those that need the model itself load the model the file names
where this server has it (ui/runs.py `runner_of`), and say so where it does not.

Read with `Trace.load`: never unpickled, the arrays' decompressed size capped, the format checked."""

from __future__ import annotations

import io
import os
import secrets
from pathlib import Path

import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.messages import literal
from attention_atlas.ui.trace_cache import keep_trace
from attention_atlas.ui.url_state import TRACE_FILE_VARIABLE

TRACE_FILES = "trace_files"  # session key: {file id: Trace}, oldest first
OPENED_FROM_SERVER = "_trace_file_opened"  # session key: the server's --trace file was opened in this session
MAX_TRACE_FILES = 2  # a session's trace files kept at once; the oldest goes first (unless the sidebar shows it)
MAX_TRACE_BYTES = 1 << 30  # the most a trace file's arrays may take decompressed (a run keeps at most 1 GiB of
# attention sources: model/hf/facts.py SOURCE_BYTES_LIMIT)
FILE_PREFIX = "file:"


def trace_files() -> dict[str, Trace]:
    return st.session_state.setdefault(TRACE_FILES, {})


def is_trace_file(model_id: str) -> bool:
    return model_id.startswith(FILE_PREFIX)


def file_trace(file_id: str) -> Trace | None:
    """The trace of a file opened in this session, kept in the server's cache while it fits (so that what the
    pages derive from it is computed once), else the session's own copy."""
    trace = st.session_state.get(TRACE_FILES, {}).get(file_id)
    return None if trace is None else keep_trace((FILE_PREFIX, file_id), trace)


def read_trace_file(name: str, source: Path | io.BytesIO) -> Trace:
    """A trace file read and checked: UserError with a sentence for a file that is not a trace file, a newer one,
    one too large, or one without attention patterns (which every page draws)."""
    trace = Trace.load(source, name=name, max_bytes=MAX_TRACE_BYTES)
    if not trace.sites():
        raise UserError(f"{name} holds no attention patterns (its run recorded {', '.join(trace.options.hooks)}), "
                        "and every page draws them: save a run whose hooks include *.hook_pattern.")
    return trace


def open_trace_file(name: str, data: bytes) -> str:
    """Read an uploaded trace file into this session (`read_trace_file`) and return its id in the model list."""
    return _listed(name, read_trace_file(name, io.BytesIO(data)))


def _listed(name: str, trace: Trace) -> str:
    """List `trace` in this session's model list under a new id (`file:<name> · <random>`: two sessions' files of
    one name never meet in the shared cache); beyond MAX_TRACE_FILES the oldest goes, unless the sidebar shows it."""
    files = trace_files()
    file_id = f"{FILE_PREFIX}{Path(name).name} · {secrets.token_hex(2)}"
    files[file_id] = trace
    shown = st.session_state.get("model_id")
    while len(files) > MAX_TRACE_FILES:
        files.pop(next(f for f in files if f != shown))
    return file_id


@st.cache_resource(max_entries=1, show_spinner="Reading the trace file…")
def _server_trace(path: str, modified: float) -> Trace:
    """The server's --trace file, read once for every session (a Trace is frozen: they share it); read again only
    if the file changes."""
    return read_trace_file(Path(path).name, Path(path))


def choose_model(model_id: str) -> None:
    """A button's callback: make `model_id` (a trace file's) the sidebar's model (before the widgets are drawn)."""
    st.session_state["model_id"] = model_id


def server_trace_file() -> str | None:
    """On a session's first run, the file `attention-atlas --trace FILE` names, opened: its id (None when the server
    names none, or after the first run). A file that cannot be read shows why, once."""
    path = os.environ.get(TRACE_FILE_VARIABLE, "").strip()
    if not path or st.session_state.get(OPENED_FROM_SERVER):
        return None
    st.session_state[OPENED_FROM_SERVER] = True
    try:
        return _listed(Path(path).name, _server_trace(path, Path(path).stat().st_mtime))
    except (UserError, OSError) as error:
        st.error(f"The trace file the server was started with cannot be opened: {error}")
        return None


def describe(trace: Trace) -> str:
    """One sentence for the sidebar (Markdown, what the file says shown literally): whose run the file holds, on
    what, and what the pages can do with it."""
    text = f"“{literal(shortened(trace.text))}” ({len(trace.tokens):,} tokens)" if trace.text else \
        f"{len(trace.tokens):,} tokens"
    target = "" if trace.target is None else f", reading the target “{literal(shortened(trace.target))}”"
    hooks = literal(", ".join(trace.options.hooks))
    return (f"A saved run of **{literal(trace.facts.model_id)}** on {text}{target} (hooks: {hooks}; causal mask: "
            f"{trace.options.causal}). Pages that need the model itself load it where this server has it.")


def shortened(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
