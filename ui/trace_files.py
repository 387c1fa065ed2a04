"""Trace files opened in a session (the Overview's upload, or `attention-atlas --trace FILE` for every new session):
listed in the sidebar's model list as `file:<name> · <its hash's first 8 hex digits>`, each shown as the run it holds,
with its model, text and options. Pages that read only the trace draw it; those that need the model itself load the
model the file names where this server has it (ui/runs.py `runner_of`), and say so where it does not.

Read with `Trace.load`: never unpickled, checked from its zip directory before any array is read, each array's dtype
and shape checked. A file's trace lives only in the server's cache (ui/trace_cache.py), under the SHA-256 of the
file's bytes: the budget counts it, two sessions with the same bytes share one copy, different bytes never meet; a
session keeps only the file's id, hash and size. An upload may take a quarter of the budget at most (`UPLOAD_SHARE`)."""

from __future__ import annotations

import hashlib
import io
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.ndif.status import using_key
from attention_atlas.ui.messages import literal
from attention_atlas.ui.trace_cache import budget_bytes, file_cached
from attention_atlas.ui.url_state import TRACE_FILE_VARIABLE

TRACE_FILES = "trace_files"  # session key: {file id: OpenedFile}, oldest first
OPENED_FROM_SERVER = "_trace_file_opened"  # session key: the server's --trace file was opened in this session
MAX_TRACE_FILES = 2  # a session's trace files listed at once; the oldest goes first (unless the sidebar shows it)
MAX_TRACE_BYTES = 1 << 30  # the most a trace file's arrays may take decompressed (a run keeps at most 1 GiB of
# attention sources: model/hf/facts.py SOURCE_BYTES_LIMIT), whatever the budget
UPLOAD_SHARE = 4  # an uploaded file's arrays may take at most this fraction (1/4) of the server's cache budget
FILE_PREFIX = "file:"
SHOWN_HASH = 8  # hex digits of a file's hash in its id (the cache's key holds all 64)


@dataclass(frozen=True)
class OpenedFile:
    """What a session keeps of a trace file it opened: no trace (the server's cache holds it), only where to find it."""

    digest: str  # the SHA-256 of the file's bytes, in hex: its trace's key in the server's cache
    nbytes: int  # its trace's bytes, as the cache counts them
    path: str = ""  # the server's --trace file, read again from the disk should the cache let go of it; "": an upload


def trace_files() -> dict[str, OpenedFile]:
    return st.session_state.setdefault(TRACE_FILES, {})


def is_trace_file(model_id: str) -> bool:
    return model_id.startswith(FILE_PREFIX)


def file_trace(file_id: str) -> Trace | None:
    """The trace of a file opened in this session, from the server's cache (the server's --trace file read again
    if the cache let go of it); None for a file not open here, or an upload the cache let go of."""
    opened = st.session_state.get(TRACE_FILES, {}).get(file_id)
    if opened is None:
        return None
    path = Path(opened.path)
    read = (lambda: read_trace_file(path.name, path, budget_bytes())) if opened.path else None
    return file_cached((FILE_PREFIX, opened.digest), read)


def upload_limit() -> int:
    """The most an uploaded file's arrays may take decompressed: a quarter of the cache budget, 1 GiB at most."""
    return min(MAX_TRACE_BYTES, budget_bytes() // UPLOAD_SHARE)


def read_trace_file(name: str, source: Path | io.BytesIO, max_bytes: int) -> Trace:
    """A trace file read and checked: UserError with a sentence for a file that is not a trace file, a newer one,
    one whose arrays take more than `max_bytes`, or one without the attention patterns of every layer (which every
    page draws)."""
    trace = Trace.load(source, name=name, max_bytes=max_bytes)
    if not trace.sites():
        raise UserError(f"{name} holds no attention patterns (its run recorded {', '.join(trace.options.hooks)}), "
                        "and every page draws them: save a run whose hooks include *.hook_pattern.")
    partial = [site for site in trace.sites() if any(trace.pattern_name(site, layer) not in trace
                                                     for layer in range(trace.n_layers(site)))]
    if partial:
        raise UserError(f"{name} holds the attention patterns of only some layers of {', '.join(partial)}, and the "
                        "pages draw every layer: save a run whose hooks include every layer's *.hook_pattern.")
    return trace


def open_trace_file(name: str, data: bytes) -> str:
    """Read an uploaded trace file into the server's cache (`read_trace_file`, at most `upload_limit` bytes; read
    once for the same bytes, whoever uploads them) and list it in this session: its id in the model list."""
    digest = hashlib.sha256(data).hexdigest()
    trace = file_cached((FILE_PREFIX, digest), lambda: read_trace_file(name, io.BytesIO(data), upload_limit()))
    return _listed(name, OpenedFile(digest, trace.nbytes))


def _listed(name: str, opened: OpenedFile) -> str:
    """List a file in this session's model list under `file:<name> · <its hash's start>`; beyond MAX_TRACE_FILES
    the oldest goes, unless the sidebar shows it."""
    files = trace_files()
    file_id = f"{FILE_PREFIX}{Path(name).name} · {opened.digest[:SHOWN_HASH]}"
    files.pop(file_id, None)  # opened again: the newest
    files[file_id] = opened
    shown = st.session_state.get("model_id")
    while len(files) > MAX_TRACE_FILES:
        files.pop(next(f for f in files if f != shown))
    return file_id


@st.cache_data(max_entries=4, show_spinner=False)
def _file_digest(path: str, modified: float, size: int) -> str:
    """The SHA-256 of the server's --trace file, read once for every session (again if the file changes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


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
        stat = Path(path).stat()
        digest = _file_digest(path, stat.st_mtime, stat.st_size)
        with st.spinner("Reading the trace file…"):
            trace = file_cached((FILE_PREFIX, digest), lambda: read_trace_file(Path(path).name, Path(path),
                                                                                budget_bytes()))
        return _listed(Path(path).name, OpenedFile(digest, trace.nbytes, path))
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


def trace_bytes(held: weakref.ref, ndif_key: str | None) -> bytes:
    """The run's trace file, made when the button is clicked (the trace still held by the server's cache); a run
    summarised on NDIF fetches its layers there with the key this session typed (`ndif_key`; None: the server's)."""
    trace = held()
    if trace is None:
        raise RuntimeError("the run was let go of by the server's memory budget before its download; run it again")
    buffer = io.BytesIO()
    with using_key(ndif_key):
        trace.save(buffer)
    return buffer.getvalue()
