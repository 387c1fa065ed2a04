"""A circuit: the edges between a decoder's input, heads, MLPs and logits that carry a prediction, found by edge
attribution (EAP, EAP-IG: model/inspect/circuit_scores.py) on a clean and a corrupted prompt, and evaluated
(model/inspect/circuit_eval.py) — the EAP-IG library's graph, scores and `evaluate_graph` (hannamw/EAP-IG; the tests
hold every number to the library's own, recorded by tests/eap_ig_reference.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.circuit_eval import evaluate_kept
from attention_atlas.model.inspect.circuit_graph import CircuitGraph
from attention_atlas.model.inspect.circuit_scores import (
    MAX_VALUES,
    CircuitRuns,
    check_method,
    prepare_circuit,
    score_steps,
)


@dataclass
class Circuit:
    """Every edge's score (`scores`: edge name -> the estimated change of the logit difference answer − wrong when
    that edge alone carries the corrupted run), the two runs' logit differences, and what evaluates a circuit."""

    answer: str
    wrong: str
    method: str  # "EAP" or "EAP-IG"
    steps: int  # EAP-IG's interpolations (EAP: 1)
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    clean: float  # the logit difference after the clean text's last token
    corrupted: float  # after the corrupted text's
    scores: dict[str, float]
    n_layers: int
    n_heads: int
    runs: CircuitRuns = field(repr=False, compare=False)

    @property
    def graph(self) -> CircuitGraph:
        return self.runs.graph

    def top(self, n: int) -> list[str]:
        """The circuit of the `n` edges of largest |score|, pruned of edges whose nodes reach neither the input nor
        the logits (the library's `apply_topn(n, absolute=True)`): its edges, the largest |score| first."""
        kept = self.graph.top_n(self._vector(), n)
        return sorted(self.graph.names(kept), key=lambda edge: -abs(self.scores[edge]))

    def evaluate(self, edges: Iterable[str]) -> float:
        """The logit difference when only `edges` (pruned first) carry the clean run and every other edge its
        corrupted value (the library's `evaluate_graph`)."""
        return float(evaluate_kept(self.runs, [self.graph.matrix(set(edges))])[0])

    def evaluate_many(self, circuits: list[Iterable[str]], tokens_per_pass: int = TOKENS_PER_PASS,
                      slot: Callable[[], AbstractContextManager] = nullcontext) -> np.ndarray:
        """`evaluate` of each circuit, (circuits,), in batches."""
        kept = [self.graph.matrix(set(edges)) for edges in circuits]
        return evaluate_kept(self.runs, kept, tokens_per_pass, slot)

    def faithfulness(self, ns: Iterable[int], tokens_per_pass: int = TOKENS_PER_PASS,
                     slot: Callable[[], AbstractContextManager] = nullcontext) -> np.ndarray:
        """(len(ns),) the logit difference of each top-n circuit (`top`), normalised: 0 = the corrupted run, 1 = the
        clean run."""
        vector = self._vector()
        kept = [self.graph.top_n(vector, int(n)) for n in ns]
        values = evaluate_kept(self.runs, kept, tokens_per_pass, slot)
        return (values - self.corrupted) / (self.clean - self.corrupted) + 0.0  # + 0.0: no -0.0

    def as_dict(self) -> dict[str, Any]:
        """Every field but the runs (JSON)."""
        return {name: value for name, value in vars(self).items() if name != "runs"}

    def _vector(self) -> np.ndarray:
        return np.array([self.scores[edge] for edge in self.graph.edges])


def circuit_steps(runner: Runner, clean: str, corrupted: str, answer: str, wrong: str, method: str = "EAP-IG",
                  steps: int = 5, *, tokens_per_pass: int = TOKENS_PER_PASS, max_values: int | None = MAX_VALUES,
                  slot: Callable[[], AbstractContextManager] = nullcontext
                  ) -> Iterator[tuple[int, int, Circuit | None]]:
    """Find a circuit pass by pass: the clean and the corrupted run (`prepare_circuit`, refusing as it does), then
    the gradient passes (`score_steps`), each within its own `slot()`. Yields (passes done, of how many, None) after
    each pass but the last, then (total, total, the Circuit); a caller that stops iterating stops the work."""
    check_method(method, steps)
    runs = prepare_circuit(runner, clean, corrupted, answer, wrong, slot, max_values)
    facts = runner.facts
    for done, total, scores in score_steps(runs, method, steps, tokens_per_pass, slot):
        found = None if scores is None else Circuit(
            answer, wrong, method, steps if method == "EAP-IG" else 1, runs.clean_tokens, runs.corrupted_tokens,
            runs.clean, runs.corrupted, dict(zip(runs.graph.edges, scores.tolist(), strict=True)),
            facts.n_decoder_layers, facts.n_heads, runs)
        yield 1 + done, 1 + total, found


def find_circuit(runner: Runner, clean: str, corrupted: str, answer: str, wrong: str, method: str = "EAP-IG",
                 steps: int = 5, *, progress: Callable[[int, int], None] | None = None,
                 max_values: int | None = MAX_VALUES) -> Circuit:
    """`circuit_steps` run to the end; `progress(done, total)` after each pass."""
    for done, total, found in circuit_steps(runner, clean, corrupted, answer, wrong, method, steps,
                                            max_values=max_values):
        if progress is not None:
            progress(done, total)
        if found is not None:
            return found
    raise AssertionError("circuit_steps ends with the circuit")
