"""What one run on NDIF moved over the network, and what a run would move, computed from a model's shapes."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from attention_atlas.model.core.trace.trace import Trace


@dataclass(frozen=True)
class Transfer:
    """Bytes of one request and of what came back. Simulated: the request as nnsight serialises it and the saved
    values as NDIF's server writes them (torch.save), neither compressed; sent to NDIF: as they crossed the network."""

    sent: int
    received: int
    simulated: bool

    @property
    def total(self) -> int:
        return self.sent + self.received

    def words(self) -> str:
        how = "simulated here" if self.simulated else "over the network"
        return f"{self.sent:,} bytes sent to NDIF, {self.received:,} bytes back ({how})"


_transfers: dict[int, Transfer] = {}  # id of a live trace -> its run's transfer
_lock = threading.Lock()


def record(trace: Trace, transfer: Transfer) -> None:
    """Remember `transfer` as the one `trace`'s run made, for as long as the trace lives."""
    key = id(trace)
    with _lock:
        _transfers[key] = transfer
    weakref.finalize(trace, _forget, key)


def _forget(key: int) -> None:
    with _lock:
        _transfers.pop(key, None)


def transfer_of(trace: Trace) -> Transfer | None:
    """What the run that made `trace` moved over NDIF's wire; None for a trace made elsewhere."""
    with _lock:
        return _transfers.get(id(trace))


def wire_bytes(layers: int, heads: int, kv_heads: int, d_head: int, tokens: int, number_bytes: int = 2,
               values: bool = False) -> int:
    """Bytes of the queries and keys (and values) of every layer of a run of `tokens` tokens, as they come back: each
    layer's (heads, tokens, d_head) queries and (kv_heads, tokens, d_head) keys in the model's dtype (`number_bytes`:
    2 for bfloat16)."""
    return layers * tokens * d_head * (heads + kv_heads * (2 if values else 1)) * number_bytes


def config_wire_bytes(config: Any, tokens: int, number_bytes: int = 2) -> int:
    """`wire_bytes` of a Hugging Face decoder's config (Llama, GPT-2 … : the standard size names)."""
    heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return wire_bytes(config.num_hidden_layers, heads, kv_heads, d_head, tokens, number_bytes)
