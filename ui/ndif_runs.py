"""Runs on NDIF in the app: what a cached one is keyed by, a Stop button while one waits, and NDIF's words for the
requests a page makes itself (a layer it opens, a generation, patched runs).

A trace sent to NDIF is cached under its request and options and under a keyed hash of the NDIF key it was run with
(HMAC-SHA256 with a secret drawn once per server process; never the key itself): a session with another key, or
none, gets a run of its own, so no person's key pays for another's runs, and a trace reaches only sessions that typed
the same text with the same key. Simulated runs involve no key: they are shared as local runs are.

Stop: a button beside the run's progress; its click stops this session's wait (the run in its worker is abandoned
when nobody waits for it any more, ui/run_scheduler.py, which closes the request's status stream) and the page says
so, with a button that runs it again. NDIF itself finishes a request it has started (nnsight can only stop waiting).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.ndif.status import KEY_VARIABLE, following
from attention_atlas.ui.ndif_choice import NDIF, typed_key
from attention_atlas.ui.trace_cache import budget_bytes, shared_cache

T = TypeVar("T")
STOPPED = "_ndif_stopped"  # session key: the cache key of the run this session stopped
_SECRET = secrets.token_bytes(32)  # this server process's: the keyed hashes mean nothing outside it


class RunStopped(UserError):
    """A run on NDIF this session stopped from the page."""


def key_identity(device: str) -> tuple[str, ...]:
    """What a cache key adds for a run on `device`: for NDIF, a keyed hash of the key this session's runs are sent
    with (typed, else the server's NDIF_API_KEY; "none" without one); nothing for any other device."""
    if device != NDIF:
        return ()
    key = typed_key() or os.environ.get(KEY_VARIABLE, "").strip()
    return (hmac.new(_SECRET, key.encode(), hashlib.sha256).hexdigest() if key else "none",)


def stoppable(key: tuple, wait: Callable[[], T]) -> T:
    """`wait()` (a run of cache key `key` waited for), with a Stop button beside its progress while it runs; RunStopped
    where this session stopped that run, with a button that runs it again."""
    if st.session_state.get(STOPPED) == key:
        st.button("Run it again", key="ndif_run_again", icon=":material/replay:", on_click=st.session_state.pop,
                  args=(STOPPED, None))
        raise RunStopped("You stopped this run on NDIF. Change the text, or run it again.")
    if key in shared_cache(budget_bytes()):
        return wait()
    slot = st.empty()
    slot.button("Stop the run on NDIF", key="ndif_stop", icon=":material/stop:", on_click=st.session_state.__setitem__,
                args=(STOPPED, key), help="Stops waiting for NDIF: the run is let go (NDIF finishes what it has "
                                          "started, and its result is not fetched).")
    try:
        found = wait()
    except Exception:
        slot.empty()
        raise
    slot.empty()  # (a script stopped meanwhile, by a click, leaves it: the next run draws the page anew)
    return found


@contextmanager
def page_words() -> Iterator[None]:
    """While open, the requests this script makes to NDIF itself say where they are ("NDIF: queued (3 s)") in one
    caption where the page is drawing, gone once each completes."""
    slot = None

    def show(words: str) -> None:
        nonlocal slot
        slot = st.empty() if slot is None else slot
        if words == "NDIF: completed":
            slot.empty()
        else:
            slot.caption(words)

    with following(show):
        yield
