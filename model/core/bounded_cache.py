"""A least-recently-used cache bounded in bytes, shared by threads, with values derived from its entries.

    cache = ByteCache(budget=2 * 2**30)
    trace, kept = cache.get_or_compute(("smollm2", text), lambda: runner.run(text))
    image = cache.derived(trace, ("model view", 24), lambda: thumbnail_grid(...))

An entry's size counts its derived values; eviction drops the least recently used entry with all of them.
A value larger than the whole budget is returned but not kept (`kept` is False). Concurrent requests for the
same key compute once (the others wait for that result); requests for different keys compute in parallel.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
_MISSING = object()  # a lookup that found nothing


def nbytes(value: Any) -> int:
    """Bytes held by a value: `memory_usage(deep=True)` for pandas objects, `.nbytes` (numpy, Trace), the sum of
    the items of a tuple, and `sys.getsizeof` of a plain number or string."""
    if callable(getattr(value, "memory_usage", None)):
        usage = value.memory_usage(deep=True)
        return int(usage.sum() if hasattr(usage, "sum") else usage)
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sys.getsizeof(value) + sum(nbytes(item) for item in value)
    if isinstance(value, int | float | str):
        return sys.getsizeof(value)
    raise TypeError(f"cannot tell the size of a {type(value).__name__}: give ByteCache a size_of that can")


@dataclass
class _Entry:
    value: Any
    nbytes: int  # the value's and its derived values'
    derived: dict[Hashable, Any] = field(default_factory=dict)


class ByteCache:
    """Values by hashable key, at most `budget` bytes in all (as measured by `size_of`), least recently used
    evicted first."""

    def __init__(self, budget: int, size_of: Callable[[Any], int] = nbytes) -> None:
        self.budget, self._size_of = budget, size_of
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self._key_of: dict[int, Hashable] = {}  # id(cached value) -> its key, to find derived values' parent
        self._pending: dict[Hashable, Future] = {}  # computations under way, by key or (key, derived name)
        self._nbytes = 0
        self._evictions = 0
        self._lock = threading.Lock()  # guards everything above; never held while computing

    @property
    def nbytes(self) -> int:
        """Bytes held now, derived values included."""
        return self._nbytes

    @property
    def evictions(self) -> int:
        """Entries evicted so far (a caller may then want to collect garbage cycles that still hold them)."""
        return self._evictions

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> tuple[T, bool]:
        """The value of `key`, computed if not cached. Returns (value, kept): kept is False when the value is
        larger than the whole budget, so it was not cached and the next request computes it again."""

        def lookup() -> Any:
            entry = self._entries.get(key)
            if entry is None:
                return _MISSING
            self._entries.move_to_end(key)
            return entry.value, True

        return self._single_flight(("value", key), lookup, compute, lambda value: (value, self._insert(key, value)))

    def derived(self, parent: object, name: Hashable, compute: Callable[[], T]) -> T:
        """A value derived from `parent`, a value of this cache (found by identity), stored with it under `name`:
        counted in its bytes and evicted with it. If `parent` is not (or no longer) cached, or the result does
        not fit beside it, it is computed and returned but not stored."""

        def lookup() -> Any:
            entry = self._parent_entry(parent)
            if entry is None or name not in entry.derived:
                return _MISSING
            self._entries.move_to_end(self._key_of[id(parent)])
            return entry.derived[name]

        with self._lock:
            cached = self._parent_entry(parent) is not None
        if not cached:
            return compute()
        flight = ("derived", id(parent), name)  # the parent is alive while its caller waits: its id is its own
        return self._single_flight(flight, lookup, compute, lambda value: self._attach(parent, name, value))

    def _single_flight(
        self, flight: Hashable, lookup: Callable[[], Any], compute: Callable[[], Any], store: Callable[[Any], Any]
    ) -> Any:
        """lookup() under the lock, else compute() once for every concurrent caller of `flight`; store(value),
        called under the lock, gives what every one of them returns (or they all get compute's exception)."""
        with self._lock:
            result = lookup()
            if result is not _MISSING:
                return result
            future = self._pending.get(flight)
            owner = future is None
            if owner:
                future = self._pending[flight] = Future()
        if not owner:
            return future.result()  # another thread is computing it
        try:
            value = compute()
            with self._lock:
                result = store(value)
        except BaseException as error:
            future.set_exception(error)
            raise
        finally:
            with self._lock:
                del self._pending[flight]
        future.set_result(result)
        return result

    def _parent_entry(self, parent: object) -> _Entry | None:
        key = self._key_of.get(id(parent))
        entry = self._entries.get(key) if key is not None else None
        return entry if entry is not None and entry.value is parent else None

    def _insert(self, key: Hashable, value: Any) -> bool:
        """Cache `value` under `key` if it fits in the budget, evicting the least recently used. (Lock held.)"""
        size = self._size_of(value)
        if size > self.budget:
            return False
        self._evict_for(size)
        self._entries[key] = _Entry(value, size)
        self._key_of[id(value)] = key
        self._nbytes += size
        return True

    def _attach(self, parent: object, name: Hashable, value: Any) -> Any:
        """Store a derived value with its parent's entry if the parent is still cached and both fit. (Lock held.)"""
        entry = self._parent_entry(parent)
        size = self._size_of(value)
        if entry is None or entry.nbytes + size > self.budget:
            return value
        self._entries.move_to_end(self._key_of[id(parent)])  # the parent is evicted last
        self._evict_for(size)
        entry.derived[name] = value
        entry.nbytes += size
        self._nbytes += size
        return value

    def _evict_for(self, size: int) -> None:
        """Drop least recently used entries until `size` more bytes fit (the newest entry is dropped last)."""
        while self._entries and self._nbytes + size > self.budget:
            key, entry = self._entries.popitem(last=False)
            if self._key_of.get(id(entry.value)) == key:  # (one object cached under two keys: the later one's)
                del self._key_of[id(entry.value)]
            self._nbytes -= entry.nbytes
            self._evictions += 1
