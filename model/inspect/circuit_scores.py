"""Edge attribution scores, as the EAP-IG library (hannamw/EAP-IG, `eap/attribute.py`) computes them: an edge's score
is (its source's output in the corrupted run − in the clean run) · the gradient of the metric with respect to its
destination's own input, summed over positions and the model dimension — the first-order estimate of how the logit
difference (answer − wrong after the last token) changes when that edge alone carries the corrupted run (negative:
the edge carries the clean answer). EAP (Syed et al. 2023) takes the gradient on the clean run; EAP-IG over the inputs
(Hanna et al. 2024) averages it over `steps` runs whose embeddings are corrupted + k/steps (clean − corrupted),
k = 0 .. steps − 1. Gradients come from passes of the model as its graph (model/inspect/circuit_pass.py), where each
destination reads the stream plus a zero that needs a gradient."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.attribution import token_id
from attention_atlas.model.inspect.circuit_graph import CircuitGraph
from attention_atlas.model.inspect.circuit_pass import GraphModel, graph_forward, graph_model, run_graph
from attention_atlas.model.inspect.patching import LEAST_DIFFERENCE

METHODS = ("EAP", "EAP-IG")
MAX_STEPS = 100  # EAP-IG's interpolations
MAX_VALUES = 50_000_000  # numbers one run's node outputs hold (nodes x tokens x d_model, float32: 200 MB): SmolLM2
# on a 20-token text holds 3.5 million
MAX_EDGES = 2_000_000  # edges of a graph whose scores are kept by name (SmolLM2: 126,000)


@dataclass
class CircuitRuns:
    """The clean and the corrupted run of a circuit, through the model as its graph: every node's output in each."""

    model: GraphModel
    answer: str
    wrong: str
    ids: tuple[int, int]  # the answer's and the wrong answer's token
    texts: torch.Tensor  # (2, len): the clean and the corrupted text's ids
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    clean: float  # the logit difference answer − wrong after the last token
    corrupted: float
    sources: torch.Tensor  # (2, sources, len, d_model): every node's output, clean then corrupted

    @property
    def graph(self) -> CircuitGraph:
        return self.model.graph


def prepare_circuit(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
                    slot: Callable[[], AbstractContextManager] = nullcontext,
                    max_values: int | None = MAX_VALUES) -> CircuitRuns:
    """Both runs of a circuit of `corrupted_text` against `clean_text` (as many tokens), read as the logit difference
    of `answer` over `wrong` (one token each) after the last token, the graph proven on them (`run_graph`'s check).
    UserError where the model has no graph, the texts or answers do not fit, the two runs give the same difference,
    or a run's node outputs would hold more than `max_values` numbers (None: no limit)."""
    forward = graph_forward(runner)
    facts = runner.facts
    ids = [token_id(runner, answer, "answer"), token_id(runner, wrong, "wrong answer")]
    texts = [forward.encode(text) for text in (clean_text, corrupted_text)]
    if len(texts[0]) != len(texts[1]):
        spelled = [" | ".join(map(repr, forward.tokens(t))) for t in texts]
        raise UserError(f"The clean and the corrupted text must have as many tokens: the clean one has "
                        f"{len(texts[0])} ({spelled[0]}), the corrupted one {len(texts[1])} ({spelled[1]}).")
    graph = CircuitGraph(facts.n_decoder_layers, facts.n_heads)
    values = len(graph.sources) * len(texts[0]) * facts.d_model
    if max_values is not None and values > max_values:
        raise UserError(f"A circuit of {facts.model_id} on {len(texts[0]):,} tokens holds {values:,} numbers a run "
                        f"({len(graph.sources):,} nodes x tokens x d_model {facts.d_model:,}); the limit here is "
                        f"{max_values:,}. Use shorter texts or a smaller model.")
    if len(graph.edges) > MAX_EDGES:
        raise UserError(f"{facts.model_id}'s graph has {len(graph.edges):,} edges; the limit here is {MAX_EDGES:,}.")
    model = graph_model(forward, len(texts[0]))
    tensor = torch.tensor(texts)
    with slot(), torch.no_grad():
        found = run_graph(model, tensor, None, *ids, check=True)
    clean, corrupted = (float(v) for v in found.metric)
    if not abs(clean - corrupted) >= LEAST_DIFFERENCE:  # NaN too
        raise UserError(f"The clean and the corrupted text give the same logit difference {answer!r} − {wrong!r} "
                        f"({clean:+.4f} and {corrupted:+.4f}): no edge carries a difference between them, and the "
                        "faithfulness curve (0 = corrupted, 1 = clean) would divide by about 0. Choose a corrupted "
                        "text that changes the answer (the names swapped, another number).")
    tokens = [forward.tokens(t) for t in texts]
    return CircuitRuns(model, answer, wrong, (ids[0], ids[1]), tensor, tokens[0], tokens[1], clean, corrupted,
                       found.sources)


class _Zeros:
    """A wiring that adds to each destination a zero that needs a gradient: after the backward pass, each zero's
    gradient is the metric's with respect to that destination's own input."""

    def __init__(self) -> None:
        self.zeros: dict[int, torch.Tensor] = {}  # first destination -> (batch, [3 x heads,] len, d_model)

    def added(self, destinations: slice | int, sources: torch.Tensor) -> torch.Tensor:
        batch, _, length, width = sources.shape
        wide = () if isinstance(destinations, int) else (destinations.stop - destinations.start,)
        zero = torch.zeros(batch, *wide, length, width, device=sources.device, requires_grad=True)
        self.zeros[destinations if isinstance(destinations, int) else destinations.start] = zero
        return zero

    def gradients(self, graph: CircuitGraph) -> torch.Tensor:
        """(destinations, len, d_model): each destination's gradient, summed over the batch."""
        found = [self.zeros[first].grad.sum(0) for first in sorted(self.zeros)]  # type: ignore[union-attr]
        return torch.cat([g if g.dim() == 3 else g[None] for g in found])


def score_steps(runs: CircuitRuns, method: str = "EAP-IG", steps: int = 5, tokens_per_pass: int = TOKENS_PER_PASS,
                slot: Callable[[], AbstractContextManager] = nullcontext
                ) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """The gradient passes of `method` ("EAP": one, on the clean run; "EAP-IG": `steps`, in batches of about
    `tokens_per_pass` tokens), each within its own `slot()`. Yields (passes done, of how many, None) before the first
    and after each but the last, then (total, total, scores): every edge's score (edges,) in `graph.edges`' order."""
    check_method(method, steps)
    length = runs.texts.shape[1]
    alphas = [None] if method == "EAP" else [k / steps for k in range(steps)]
    rows = max(1, tokens_per_pass // length)
    chunks = [alphas[i:i + rows] for i in range(0, len(alphas), rows)]
    clean, corrupted = runs.sources[0], runs.sources[1]  # (sources, len, d_model)
    total = torch.zeros(len(runs.graph.destinations), length, clean.shape[-1], device=clean.device)
    yield 0, len(chunks), None
    for done, chunk in enumerate(chunks, 1):
        zeros = _Zeros()
        start = None if chunk[0] is None else torch.stack([corrupted[0] + a * (clean[0] - corrupted[0])
                                                           for a in chunk if a is not None])  # (rows, len, d_model)
        with slot(), torch.enable_grad():
            found = run_graph(runs.model, runs.texts[:1].expand(len(chunk), -1), zeros, *runs.ids, start)
            found.metric.sum().backward()
        total += zeros.gradients(runs.graph)
        if done < len(chunks):
            yield done, len(chunks), None
    yield len(chunks), len(chunks), edge_scores(runs.graph, corrupted - clean, total / len(alphas))


def check_method(method: str, steps: int) -> None:
    """UserError for a method other than EAP and EAP-IG, or EAP-IG steps outside 1 .. MAX_STEPS."""
    if method not in METHODS:
        raise UserError(f"Unknown method {method!r}: choose one of {', '.join(METHODS)}.")
    if method == "EAP-IG" and not 1 <= steps <= MAX_STEPS:
        raise UserError(f"EAP-IG takes 1 to {MAX_STEPS} steps, not {steps}.")


def edge_scores(graph: CircuitGraph, difference: torch.Tensor, gradients: torch.Tensor) -> np.ndarray:
    """(edges,) each edge's score: its source's `difference` (sources, len, d_model) · its destination's
    `gradients` (destinations, len, d_model), summed over positions and the model dimension."""
    matrix = difference.flatten(1) @ gradients.flatten(1).T  # (sources, destinations)
    sources, destinations = (torch.as_tensor(i) for i in graph.edge_index)
    return matrix[sources, destinations].double().cpu().numpy()
