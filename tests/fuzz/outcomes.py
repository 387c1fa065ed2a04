"""What every fuzz test shares: how many examples a profile tries, the one-second limit, what a refusal's message
must look like, and the count of each test's outcomes (printed at the end of the run: tests/fuzz/conftest.py)."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hypothesis import settings

PROFILE = os.environ.get("ATLAS_FUZZ", "ci")  # "ci" (make test) or "deep" (ATLAS_FUZZ=deep)
DEEP_FACTOR = 20  # the deep profile tries this many times the examples of ci
LIMIT_S = 1.0  # each example opens, or is refused, within this
COUNTS: dict[str, Counter[str]] = {}  # test -> outcome -> examples


def examples(ci: int) -> settings:
    """This test's examples: `ci` of them in the ci profile, DEEP_FACTOR times as many in the deep one."""
    return settings(max_examples=ci * (DEEP_FACTOR if PROFILE == "deep" else 1))


def counter(test: str) -> Counter[str]:
    """The outcomes of `test`, counted (a fresh count for each run of it)."""
    COUNTS[test] = Counter()
    return COUNTS[test]


@contextmanager
def within_limit(what: Callable[[], str]) -> Iterator[None]:
    """Fails when the block takes more than LIMIT_S (`what` says which input, for the message)."""
    start = time.perf_counter()
    yield
    took = time.perf_counter() - start
    assert took < LIMIT_S, f"{took:.2f} s for {what()}"


def is_sentence(message: str, name: str = "") -> bool:
    """A message for a person: it starts with the file's `name` or a capital letter and ends with a full stop
    (a closing bracket or quote may follow it)."""
    message = message.strip()
    starts = (bool(name) and message.startswith(name)) or message[:1].isupper()
    return starts and re.search(r"\.[)'\"”]?$", message) is not None
