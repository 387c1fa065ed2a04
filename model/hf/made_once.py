"""What every layer of a forward pass makes alike from a tensor they all read (a windowed or chunked mask, BLOOM's and
MPT's relative ALiBi), made once on a thread and kept while that tensor lives."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

import torch

Made = TypeVar("Made")


def made_once(tensor: torch.Tensor, key: tuple, make: Callable[[], Made]) -> Made:
    """`make()`, made once per `tensor` and `key` on this thread and kept while `tensor` lives."""
    cache = _made.__dict__.setdefault("cache", {})
    entry = (id(tensor), *key)
    if entry not in cache:
        cache[entry] = make()
        weakref.finalize(tensor, cache.pop, entry, None)
    return cache[entry]


_made = threading.local()  # .cache: (id of a tensor, *key) -> what was made from it
