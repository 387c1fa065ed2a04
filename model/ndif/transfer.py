"""What one run on NDIF moved over the network (its request, and the layers fetched for it since), and what a run
would move, computed from a model's shapes."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.attention.row_reduction import STATISTICS
from attention_atlas.model.core.attention.summary import ROLLOUT_SIZE, THUMBNAIL_SIZE
from attention_atlas.model.core.trace.trace import Trace


@dataclass(frozen=True)
class Transfer:
    """Bytes of requests and of what came back. Simulated: the request as nnsight serialises it and the saved
    values as NDIF's server writes them (torch.save), neither compressed; sent to NDIF: as they crossed the network."""

    sent: int
    received: int
    simulated: bool
    requests: int = 1

    @property
    def transfer_bytes(self) -> int:
        """Every byte both ways."""
        return self.sent + self.received

    def __add__(self, other: Transfer) -> Transfer:
        return Transfer(self.sent + other.sent, self.received + other.received, self.simulated and other.simulated,
                        self.requests + other.requests)

    def words(self) -> str:
        how = "simulated here" if self.simulated else "over the network"
        requests = "one request" if self.requests == 1 else f"{self.requests} requests"
        return f"{self.sent:,} bytes sent to NDIF, {self.received:,} bytes back ({requests}, {how})"


class Ledger:
    """What one run has moved: its own request's transfer, and each fetch of a layer's queries and keys added as it
    is made (model/ndif/fetched.py)."""

    def __init__(self, run: Transfer) -> None:
        self._total, self._lock = run, threading.Lock()

    def add(self, fetch: Transfer) -> None:
        with self._lock:
            self._total = self._total + fetch

    @property
    def total(self) -> Transfer:
        return self._total


_ledgers: dict[int, Ledger] = {}  # id of a live trace -> its run's ledger
_lock = threading.Lock()


def record(trace: Trace, ledger: Ledger) -> None:
    """Remember `ledger` as the one of `trace`'s run, for as long as the trace lives."""
    key = id(trace)
    with _lock:
        _ledgers[key] = ledger
    weakref.finalize(trace, _forget, key)


def _forget(key: int) -> None:
    with _lock:
        _ledgers.pop(key, None)


def transfer_of(trace: Trace) -> Transfer | None:
    """What the run that made `trace` moved over NDIF's wire, the layers fetched for it since included; None for a
    trace made elsewhere."""
    with _lock:
        ledger = _ledgers.get(id(trace))
    return None if ledger is None else ledger.total


def wire_bytes(layers: int, heads: int, kv_heads: int, d_head: int, tokens: int, number_bytes: int = 2,
               values: bool = False) -> int:
    """Bytes of the queries and keys (and values) of `layers` layers of a run of `tokens` tokens, as they come back:
    each layer's (heads, tokens, d_head) queries and (kv_heads, tokens, d_head) keys in the model's dtype
    (`number_bytes`: 2 for bfloat16)."""
    return layers * tokens * d_head * (heads + kv_heads * (2 if values else 1)) * number_bytes


def summary_bytes(layers: int, heads: int, tokens: int) -> int:
    """Bytes of the sums a run summarised on NDIF brings back (model/ndif/remote_summary.py) for `layers` layers of
    `tokens` tokens: a layer's thumbnails' lower triangles (heads, t (t + 1) / 2) and rollout's (b (b + 1) / 2)
    float32, its statistics (heads, 9) float64."""
    t, b = len(block_starts(tokens, THUMBNAIL_SIZE)) - 1, len(block_starts(tokens, ROLLOUT_SIZE)) - 1
    return layers * (4 * heads * t * (t + 1) // 2 + 4 * b * (b + 1) // 2 + 8 * heads * len(STATISTICS))


def layer_shapes(config: Any) -> tuple[int, int, int, int]:
    """(layers, heads, kv_heads, d_head) of a Hugging Face decoder's config (Llama, GPT-2 … : the standard names)."""
    heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return config.num_hidden_layers, heads, kv_heads, d_head


def config_wire_bytes(config: Any, tokens: int, number_bytes: int = 2) -> int:
    """`wire_bytes` of every layer of a Hugging Face decoder's config."""
    return wire_bytes(*layer_shapes(config), tokens, number_bytes)


def config_layer_bytes(config: Any, tokens: int, number_bytes: int = 2) -> int:
    """`wire_bytes` of one layer of a Hugging Face decoder's config: what a view's fetch of a layer brings back."""
    return wire_bytes(1, *layer_shapes(config)[1:], tokens, number_bytes)


def config_run_bytes(config: Any, tokens: int, number_bytes: int = 2) -> int:
    """What the app's frame run brings back summarised on NDIF (`summary_bytes`), with the logits of its last
    position (vocabulary, in the model's dtype), before torch.save's own bytes and the generated token ids."""
    layers, heads, _, _ = layer_shapes(config)
    return summary_bytes(layers, heads, tokens) + config.vocab_size * number_bytes
