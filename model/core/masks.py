"""Attention masks.

Convention, everywhere in this project: a mask is a bool tensor broadcastable to
(batch, heads, q_len, k_len) and **True means the query may attend to the key**. A False entry gets
score -inf before the softmax, so its probability is exactly 0. Every query must keep at least one
visible key (`check_every_query_sees_a_key`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attention_atlas.model.core.errors import UserError


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Hide padding keys. ids: (batch, len) -> (batch, 1, 1, len)."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The "subsequent" mask: query i sees keys 0..i. -> (1, 1, length, length), lower triangle True."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def blocked_mask(
    length: int, blocked: Iterable[tuple[int, int]], device: torch.device | str | None = None
) -> torch.Tensor:
    """All visible except the given (query, key) pairs. -> (1, 1, length, length)."""
    mask = torch.ones(length, length, dtype=torch.bool, device=device)
    for query, key in blocked:
        if not (0 <= query < length and 0 <= key < length):
            raise UserError(
                f"blocked position (query {query}, key {key}) is outside the {length} x {length} attention matrix"
            )
        mask[query, key] = False
    return mask[None, None]


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """A key is visible only if every given mask lets it through (logical AND, broadcasting)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    result = present[0]
    for mask in present[1:]:
        result = result & mask
    return result


def self_attention_mask(
    length: int, real: int, causal: bool, blocked: tuple[tuple[int, int], ...] = (),
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(1, 1, length, length): the keys after the first `real` (padding) hidden, causal if asked, the blocked
    (query, key) pairs hidden; ValueError if that leaves some query no key. Both runners build theirs here."""
    keys = (torch.arange(length, device=device) < real)[None, None, None, :]
    mask = combine(keys, causal_mask(length, device) if causal else None,
                   blocked_mask(length, blocked, device) if blocked else None).expand(1, 1, length, length)
    check_every_query_sees_a_key(mask)
    return mask


def check_every_query_sees_a_key(mask: torch.Tensor | None) -> None:
    """Raise ValueError if some query row has no visible key (its softmax would be undefined)."""
    if mask is None:
        return
    empty_rows = ~mask.any(dim=-1)  # (..., q_len)
    if bool(empty_rows.any()):
        queries = sorted({int(i) for i in empty_rows.nonzero()[:, -1]})
        raise UserError(
            f"the mask hides every key from query position(s) {queries}: each query must see at least one key"
        )


def hidden_key_pairs(length: int, keys: Iterable[int], queries: Iterable[int] = ()) -> tuple[tuple[int, int], ...]:
    """The (query, key) pairs that hide `keys` from `queries` (none given: from every query), for RunOptions.blocked."""
    rows = sorted(set(queries)) or range(length)
    return tuple((query, key) for query in rows for key in sorted(set(keys)))


def outside_window_pairs(length: int, width: int) -> tuple[tuple[int, int], ...]:
    """A band mask: the (query, key) pairs more than `width` positions apart, for RunOptions.blocked."""
    return tuple((query, key) for query in range(length) for key in range(length) if abs(query - key) > width)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool (batch, 1, q, k), True = may attend -> 0 where allowed, the dtype's minimum elsewhere (what a Hugging Face
    model adds to its scores). Filled in place: at 32,768 tokens a second float32 (q, k) copy was 4 GiB more."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)
