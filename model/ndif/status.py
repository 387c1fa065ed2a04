"""What a run on NDIF tells whoever waits for it, and the API key it runs with: both belong to the thread that runs it
(the app runs a trace in a worker thread, model/ndif is shared by every session), set for that run only and gone
after it. Nothing here imports nnsight: the app reads it without loading NDIF's client."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KEY_VARIABLE = "NDIF_API_KEY"  # where the key is read from when no run was given one
_local = threading.local()  # .listen: the current run's listener; .key: the key the current run was given


@contextmanager
def following(listen: Callable[[str], None]) -> Iterator[None]:
    """While open, this thread's NDIF runs call listen(words) as their request moves ("NDIF: queued"), and again
    every few tenths of a second while they wait; whatever `listen` raises stops the wait there."""
    previous = getattr(_local, "listen", None)
    _local.listen = listen
    try:
        yield
    finally:
        _local.listen = previous


def tell(words: str) -> None:
    """Hand `words` to this thread's listener, if any."""
    listen = getattr(_local, "listen", None)
    if listen is not None:
        listen(words)


@contextmanager
def using_key(key: str | None) -> Iterator[None]:
    """While open, this thread's NDIF runs send `key` (None or "": the environment's, `api_key`). The key is held in
    this thread's state only while the block runs."""
    previous = getattr(_local, "key", None)
    _local.key = key or None
    try:
        yield
    finally:
        _local.key = previous


def api_key() -> str | None:
    """The key of this thread's run, else NDIF_API_KEY's, else None."""
    return getattr(_local, "key", None) or os.environ.get(KEY_VARIABLE, "").strip() or None
