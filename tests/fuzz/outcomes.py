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
LIMIT_S = 1.0  # each example opens, or is refused, within this much of the process's CPU time
WALL_LIMIT_S = 5.0  # and this much time on the clock: a test machine's other processes share its cores (a 0.05 s
# example took 1.2 s on a 2-core machine running ten), but nothing may wait without end
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
    """Fails when the block takes more than LIMIT_S of CPU time or WALL_LIMIT_S on the clock (`what` says which
    input, for the message)."""
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert cpu < LIMIT_S and wall < WALL_LIMIT_S, f"{cpu:.2f} s of CPU time ({wall:.2f} s on the clock) for {what()}"


def is_sentence(message: str, name: str = "") -> bool:
    """A message for a person: it starts with the file's `name` or a capital letter and ends with a full stop
    (a closing bracket or quote may follow it)."""
    message = message.strip()
    starts = (bool(name) and message.startswith(name)) or message[:1].isupper()
    return starts and re.search(r"\.[)'\"”]?$", message) is not None
