"""Waiting on another thread in a test: poll with a deadline, never sleep a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        time.sleep(0.02)
