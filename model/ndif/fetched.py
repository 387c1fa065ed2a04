"""A layer's pattern source whose queries and keys stayed on NDIF: a run summarised there (model/ndif/wire.py) brings
back its summary, and a view that opens a head of a layer fetches that layer's queries and keys then, in a request of
its own (sent with the key of whoever opens it), under the run's edits. Each run keeps the last layers it fetched,
KEPT_BYTES of them (at least one: a layer of Llama-3.1-70B at 2,048 tokens is 72 MiB of float32 queries and keys
here, at 8,192 tokens 288 MiB). A cached trace is counted when it is cached, before any fetch, so the server's cache
counts what its fetches may hold too (`fetch_allowance`); what each fetch moved is added to the run's transfer
(model/ndif/transfer.py).

`FetchedSource` is a PatternSource (model/core/attention/source.py) to every reader: its shape is known before the
fetch, every other field is the fetched source's."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from attention_atlas.model.core.attention.arrays import Array, Kept
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.ndif.transfer import Ledger, Transfer

KEPT_BYTES = 256 << 20  # a run's fetched layers kept here, at most (at least one)


class Fetcher:
    """One run's layers summarised on NDIF, fetched when first read and kept (the last `keep`), one fetch at a
    time."""

    def __init__(self, fetch: Callable[[str], tuple[PatternSource, Transfer]], ledger: Ledger, keep: int,
                 layer_bytes: int) -> None:
        self._fetch, self._ledger, self._keep = fetch, ledger, keep
        self.allowance = keep * layer_bytes  # the most its kept layers hold (layer_bytes: one layer's)
        self._kept: OrderedDict[str, PatternSource] = OrderedDict()
        self._lock = threading.Lock()

    def source(self, name: str) -> PatternSource:
        """The source of pattern hook `name`: kept, or fetched now."""
        with self._lock:
            if name in self._kept:
                self._kept.move_to_end(name)
                return self._kept[name]
            source, transfer = self._fetch(name)
            self._ledger.add(transfer)
            for array in source.arrays():  # shared by every session that reads the run, as a trace's arrays
                if isinstance(array, np.ndarray):
                    array.flags.writeable = False
            self._kept[name] = source
            while len(self._kept) > self._keep:
                self._kept.popitem(last=False)
            return source

    def kept(self, name: str) -> PatternSource | None:
        with self._lock:
            return self._kept.get(name)


def fetch_allowance(trace: Trace) -> int:
    """The most bytes the layers fetched for `trace` may hold at once (0 for a trace whose sources are all here)."""
    fetchers = {id(source._fetcher): source._fetcher for source in trace.pattern_sources.values()
                if isinstance(source, FetchedSource)}
    return sum(fetcher.allowance for fetcher in fetchers.values())


class FetchedSource(PatternSource):
    """A pattern source of (heads, q_len, k_len) whose fields are fetched from NDIF when first read."""

    def __init__(self, shape: tuple[int, int, int], name: str, fetcher: Fetcher) -> None:
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fetcher", fetcher)

    def fetched(self) -> PatternSource:
        return self._fetcher.source(self._name)

    @property
    def query(self) -> Kept:
        return self.fetched().query

    @property
    def key(self) -> Kept:
        return self.fetched().key

    @property
    def scale(self) -> float:
        return self.fetched().scale

    @property
    def allowed(self) -> Array:
        return self.fetched().allowed

    @property
    def bias(self) -> Array | None:
        return self.fetched().bias

    @property
    def softcap(self) -> float | None:
        return self.fetched().softcap

    @property
    def sinks(self) -> Array | None:
        return self.fetched().sinks

    @property
    def device(self) -> str:
        return self.fetched().device

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._shape

    def arrays(self) -> list[np.ndarray]:
        """The arrays held: the fetched source's while the run keeps it, else none."""
        kept = self._fetcher.kept(self._name)
        return [] if kept is None else kept.arrays()

    def __getitem__(self, index: int) -> PatternSource:
        return self.fetched()[index]

    def __repr__(self) -> str:
        return f"FetchedSource({self._name!r}, shape={self._shape})"

    def __eq__(self, other: object) -> bool:  # not the dataclass's, which would compare (and fetch) every field
        return self is other

    __hash__ = object.__hash__
