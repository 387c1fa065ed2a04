"""A circuit evaluated as the EAP-IG library's `evaluate_graph` evaluates it: the clean text run with every
destination reading the stream plus, for each edge into it that is not kept, (its source's output in the corrupted
run − its output in this run) — so the kept edges carry this run and every other edge the corrupted one — and the
logit difference (answer − wrong after the last token) read. The edges are pruned first (the library's `prune`).
A circuit of every edge is the clean run itself, one of none the corrupted run (their differences, exactly, as
their runs measured them); several circuits go in one batch, a row each."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch

from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.circuit_pass import run_graph
from attention_atlas.model.inspect.circuit_scores import CircuitRuns


class _Corrupting:
    """A wiring that adds, to each destination of row b, its edges' corrupted − current source outputs where
    `kept[b]` (sources, destinations) does not keep the edge."""

    def __init__(self, kept: torch.Tensor, corrupted: torch.Tensor) -> None:
        self.dropped = (~kept).float()  # (batch, sources, destinations)
        self.corrupted = corrupted  # (sources, len, d_model)

    def added(self, destinations: slice | int, sources: torch.Tensor) -> torch.Tensor:
        n = sources.shape[1]
        dropped = self.dropped[:, :n, destinations]  # (batch, n[, wide])
        pattern = "bn,{}->bpd" if dropped.dim() == 2 else "bnk,{}->bkpd"
        return (torch.einsum(pattern.format("npd"), dropped, self.corrupted[:n])
                - torch.einsum(pattern.format("bnpd"), dropped, sources))


def evaluate_kept(runs: CircuitRuns, kept: list[np.ndarray], tokens_per_pass: int = TOKENS_PER_PASS,
                  slot: Callable[[], AbstractContextManager] = nullcontext) -> np.ndarray:
    """(circuits,) the logit difference of each circuit, `kept` (sources, destinations) bool matrices of edges, each
    pruned first; in batches of about `tokens_per_pass` tokens, each batch within its own `slot()`."""
    graph = runs.graph
    pruned = [graph.prune(k & graph.real) for k in kept]
    found = np.array([runs.clean if (k == graph.real).all() else runs.corrupted if not k.any() else np.nan
                      for k in pruned])
    todo = [i for i, k in enumerate(pruned) if np.isnan(found[i])]
    rows = max(1, tokens_per_pass // runs.texts.shape[1])
    corrupted = runs.sources[1]
    for start in range(0, len(todo), rows):
        chunk = todo[start:start + rows]
        wiring = _Corrupting(torch.as_tensor(np.stack([pruned[i] for i in chunk]), device=corrupted.device),
                             corrupted)
        with slot(), torch.no_grad():
            values = run_graph(runs.model, runs.texts[:1].expand(len(chunk), -1), wiring, *runs.ids).metric
        found[chunk] = values.double().cpu().numpy()
    return found
