"""One attention layer summarised where the model runs, on NDIF: the sums a site's summary (model/core/attention/
summary.py) is made of, computed from the queries and keys the layer's attention function was handed, so that only
these sums cross the wire and not the queries and keys.

Shipped by its source with model/ndif/remote.py (nnsight.register): it imports torch alone (a contract test holds it to
that). The layout is plain data made here from the summary's own (model/ndif/summaries.py): the first position of each
thumbnail block and of each rollout block, the first query of the later queries' shares, each query's induction
target. The probabilities are computed as the app's attention function computes them in a run (model/hf/heads.py):
softmax(Q K^T x scale) in float32, the scores soft-capped where the model caps them, keys after the query hidden (the
model's own causal mask: NDIF runs a model under no other), and those `sliding_window` positions away or more; a
head's sink logit one more key, dropped after. The sums mean what model/core/attention/row_reduction.py's do.
"""

from __future__ import annotations

from typing import Any

import torch

BLOCK_FLOATS = 1 << 24  # a block of query rows: (heads, rows, keys) float32 scores at most this many numbers (64 MiB)
LN_2 = 0.6931471805599453
Layout = dict[str, Any]  # "thumbnail", "rollout": block starts then n; "from_row": int; "targets": list or None


def reduce_layer(query: torch.Tensor, key: torch.Tensor, kwargs: dict[str, Any], layout: Layout
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """query (1, heads, n, d_head), key (1, kv_heads, n, d_head) and the attention call's keywords -> (thumbnail sums
    (heads, t (t + 1) / 2): the lower triangle of each head's (t, t) block sums, row by row; statistic sums (heads, 9)
    float64 over the query rows; rollout sums (b (b + 1) / 2,): the heads' summed probabilities' (b, b) block sums,
    lower triangle), on the host. Blocks above the diagonal hold no visible key: a causal layer's are 0."""
    q, k = query[0].detach().float(), key[0].detach().float()  # (heads, n, d_head), (kv_heads, n, d_head)
    heads, n, d_head = q.shape
    device = q.device
    thumb_of, t = _block_of(layout["thumbnail"], n, device)  # (n,) each position's block
    roll_of, b = _block_of(layout["rollout"], n, device)
    targets = None if layout["targets"] is None else torch.tensor(layout["targets"], device=device)
    thumbnail = torch.zeros(heads, t, t, device=device)
    rollout = torch.zeros(b, b, device=device)
    statistics = torch.zeros(heads, 9, dtype=torch.float64, device=device)
    scale = float(kwargs.get("scaling") or d_head**-0.5)
    step = max(1, min(n, BLOCK_FLOATS // (heads * n)))
    for start in range(0, n, step):
        end = min(n, start + step)
        p = probabilities(q[:, start:end], k[:, :end], start, scale, kwargs)  # (heads, rows, end)
        statistics += row_statistics(p, start, int(layout["from_row"]), targets)
        thumbnail.index_add_(1, thumb_of[start:end], _column_sums(p, thumb_of[:end], t))
        rollout.index_add_(0, roll_of[start:end], _column_sums(p.sum(0), roll_of[:end], b))
    thumb_rows, thumb_cols = torch.tril_indices(t, t, device=device)
    roll_rows, roll_cols = torch.tril_indices(b, b, device=device)
    return (thumbnail[:, thumb_rows, thumb_cols].cpu(), statistics.cpu(), rollout[roll_rows, roll_cols].cpu())


def last_row(query: torch.Tensor, key: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """The last query's probabilities over the keys it read, (heads, k_len) in the query's dtype, from query (1,
    heads, q_len, d_head) and key (1, kv_heads, k_len, d_head): a generation step's, the last key its own position
    (a sliding-window layer's cache keeps only its last keys)."""
    q, k = query[0, :, -1:].detach().float(), key[0].detach().float()
    scale = float(kwargs.get("scaling") or q.shape[-1] ** -0.5)
    return probabilities(q, k, k.shape[1] - 1, scale, kwargs)[:, 0].to(query.dtype)


def probabilities(q: torch.Tensor, k: torch.Tensor, start: int, scale: float, kwargs: dict[str, Any]) -> torch.Tensor:
    """(heads, rows, end) float32 probabilities of queries start.. (q: (heads, rows, d_head)) over keys 0..end-1
    (k: (kv_heads, end, d_head)); query head h reads key head h // (heads / kv_heads)."""
    heads, rows, d_head = q.shape
    kv_heads, end = k.shape[:2]
    grouped = q.reshape(kv_heads, heads // kv_heads * rows, d_head)
    scores = torch.matmul(grouped, k.transpose(1, 2)).view(heads, rows, end) * scale
    softcap = kwargs.get("softcap")
    if isinstance(softcap, int | float):
        scores = torch.tanh(scores / softcap) * softcap
    queries = torch.arange(start, start + rows, device=q.device)[:, None]  # (rows, 1)
    distance = queries - torch.arange(end, device=q.device)[None]  # (rows, end)
    hidden = distance < 0
    window = kwargs.get("sliding_window")
    if isinstance(window, int) and window > 0:
        hidden = hidden | (distance >= window)
    scores = scores.masked_fill(hidden, float("-inf"))
    sinks = kwargs.get("s_aux")
    if isinstance(sinks, torch.Tensor):  # one more key a head, its probability dropped after the softmax
        column = sinks.detach().float().to(q.device)[:, None, None].expand(heads, rows, 1)
        return torch.cat([scores, column], -1).softmax(-1)[..., :end]
    return scores.softmax(-1)


def row_statistics(p: torch.Tensor, start: int, from_row: int, targets: torch.Tensor | None) -> torch.Tensor:
    """(heads, 9) float64 sums over rows start.. of p (heads, rows, end): entropy in bits, distance, shares to the
    first token, the previous one and itself, the first and previous token's again from query `from_row` on, the share
    on each query's induction target (`targets`, -1: none), the distance less the first token's part."""
    rows, end = p.shape[1:]
    queries = torch.arange(start, start + rows, device=p.device)  # (rows,)
    entropy = -torch.special.xlogy(p, p).sum(-1) / LN_2  # (heads, rows)
    distance = (p * (queries[:, None] - torch.arange(end, device=p.device)[None]).abs()).sum(-1)
    first = p[..., 0]
    previous, itself = _shares(p, queries - 1), _shares(p, queries)
    later = (queries >= from_row).float()  # (rows,)
    induction = torch.zeros_like(first) if targets is None else _shares(p, targets[start : start + rows])
    off_first = distance - first * queries
    each = torch.stack([entropy, distance, first, previous, itself, first * later, previous * later, induction,
                        off_first], -1)  # (heads, rows, 9)
    return each.double().sum(1)


def _shares(p: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(heads, rows): p[h, r, keys[r]], 0 where keys[r] < 0."""
    taken = p.gather(-1, keys.clamp(min=0).expand(*p.shape[:2])[..., None])[..., 0]
    return taken.masked_fill(keys < 0, 0.0)


def _block_of(starts: list[int], n: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """(each of the n positions' block (n,), the number of blocks) from the blocks' first positions, then n."""
    firsts = torch.tensor(starts[:-1], device=device)
    return torch.searchsorted(firsts, torch.arange(n, device=device), right=True) - 1, len(starts) - 1


def _column_sums(rows: torch.Tensor, block_of: torch.Tensor, blocks: int) -> torch.Tensor:
    """(..., width) -> (..., blocks): each row's sum over each block of columns (block_of: (width,))."""
    return rows.new_zeros(*rows.shape[:-1], blocks).index_add_(-1, block_of, rows)
