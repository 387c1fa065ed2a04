"""The contribution graph (Ferrando and Voita 2024, "Information flow routes"): how much each token's residual stream
at each layer draws on each earlier token through attention, and on the MLP, kept where it matters for one
prediction.

Each sum in the stream is split into its parts: after attention, the residual going in and, for every earlier token
j and head h, what h writes from j (its pattern weight times j's value through h's rows of W_O); after the MLP, the
residual and the MLP's output. A part's share of a sum is its proximity to it, max(ε, ‖sum‖₁ − ‖sum − part‖₁),
normalised over the parts, so the shares of a sum add up to 1. From the prediction's node, edges above a threshold
are followed down to the input tokens: what is left is the route the prediction was computed along.

Nodes are levels of the stream: level 2l is the residual going into layer l, 2l + 1 the residual after its
attention, 2L the last layer's output.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import heads_add_up
from attention_atlas.model.inspect.head_weights import output_projection
from attention_atlas.model.inspect.stream_parts import position_in, refuse_other_layers

EPS = 1e-5  # the least proximity a part has (every part keeps a share above 0)
THRESHOLD = 0.04  # the share below which an edge is not followed (the paper's default)
EdgeKind = Literal["attention", "residual", "mlp"]


@dataclass(frozen=True)
class Edge:
    """Part of the sum at (`level` + 1, `target`) that comes from (`level`, `source`): its share `weight` of that sum;
    an attention edge's `head` is the head that brings most of it (and `heads` each head's share)."""

    kind: EdgeKind
    level: int
    source: int
    target: int
    weight: float
    head: int | None = None
    heads: tuple[float, ...] = ()

    @property
    def layer(self) -> int:
        return self.level // 2


@dataclass(frozen=True)
class ContributionGraph:
    """The edges on the routes to the prediction at `position`, each above `threshold`."""

    tokens: list[str]
    n_layers: int
    position: int
    threshold: float
    edges: list[Edge]

    @property
    def nbytes(self) -> int:
        """About what the edges hold (a cache counts it): each object, its tuple of heads and their floats."""
        return sum(sys.getsizeof(e) + sys.getsizeof(e.heads) + 24 * len(e.heads) for e in self.edges)


def contribution_options() -> RunOptions:
    """What a run records for the graph: the stream's sums, each block's output, the values and the patterns."""
    return RunOptions(hooks=("decoder.*.hook_resid_pre", "decoder.*.hook_resid_mid", "decoder.*.hook_resid_post",
                             "decoder.*.hook_attn_out", "decoder.*.hook_mlp_out", "decoder.*.attn.hook_v",
                             "decoder.*.attn.hook_pattern"))


def shares(parts: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """parts (n, d) of a sum `whole` (d,): each part's proximity to the whole, normalised to sum to 1, (n,)."""
    proximity = np.abs(whole).sum() - np.abs(whole[None] - parts).sum(axis=-1)
    proximity = np.maximum(proximity, EPS)
    return proximity / proximity.sum()


def contribution_graph(runner: Runner, trace: Trace, position: int = -1, threshold: float = THRESHOLD
                       ) -> ContributionGraph:
    """The graph of the prediction at `position` (-1: the last) of a causal LM's run recorded with
    `contribution_options`. UserError for models whose stream is not a plain sum of blocks (post-norm, attention and
    MLP side by side) or not a decoder."""
    facts = runner.facts
    if facts.kind != "decoder":
        raise UserError(f"{facts.model_id} is {'an' if facts.kind[0] == 'e' else 'a'} {facts.kind}: the contribution "
                        "graph here follows a causal language model's prediction.")
    refuse_other_layers(facts, "the contribution graph")
    if facts.norm.startswith("post") or "parallel" in facts.norm or "decoder.0.hook_resid_mid" not in trace:
        raise UserError(f"{facts.model_id}: its residual stream is not attention's sum, then the MLP's (a norm after "
                        "each block, or both side by side), so the graph's two steps a layer do not apply.")
    layers, predicted = facts.n_decoder_layers, position_in(position, len(trace.ids))
    found = _Splitter(runner, trace)
    edges, frontier = [], {predicted}
    for level in reversed(range(2 * layers)):
        reached: set[int] = set()
        for target in sorted(frontier):
            for edge in found.edges_into(level, target):
                if edge.weight > threshold:
                    edges.append(edge)
                    reached.add(edge.source)
        frontier = reached
    return ContributionGraph(trace.tokens, layers, predicted, threshold, edges)


class _Splitter:
    """Each sum's parts and their shares, computed for the nodes a graph reaches."""

    def __init__(self, runner: Runner, trace: Trace) -> None:
        self.runner, self.trace, self.facts = runner, trace, runner.facts
        self.projection = cache(lambda layer: output_projection(runner, "decoder.attn", layer))  # W_O, its bias

    def edges_into(self, level: int, target: int) -> list[Edge]:
        """The edges into node (level + 1, target)."""
        layer, t = level // 2, self.trace
        if level % 2:  # the MLP's sum: residual after attention + the MLP's output
            whole = t[f"decoder.{layer}.hook_resid_post"][target].astype(np.float64)
            parts = np.stack([t[f"decoder.{layer}.hook_resid_mid"][target], t[f"decoder.{layer}.hook_mlp_out"][target]])
            residual, mlp = shares(parts.astype(np.float64), whole)
            return [Edge("residual", level, target, target, float(residual)), Edge("mlp", level, target, target,
                                                                                  float(mlp))]
        whole = t[f"decoder.{layer}.hook_resid_mid"][target].astype(np.float64)
        written = self._written(layer, target)  # (sources, heads, d_model)
        self._check(layer, target, written)
        sources, heads = written.shape[:2]
        parts = np.concatenate([written.reshape(sources * heads, -1),
                                t[f"decoder.{layer}.hook_resid_pre"][target][None].astype(np.float64)])
        found = shares(parts, whole)
        by_head, residual = found[:-1].reshape(sources, heads), found[-1]
        edges = [Edge("residual", level, target, target, float(residual))]
        for source in range(sources):
            edges.append(Edge("attention", level, source, target, float(by_head[source].sum()),
                              int(by_head[source].argmax()), tuple(float(s) for s in by_head[source])))
        return edges

    def _check(self, layer: int, target: int, written: np.ndarray) -> None:
        """UserError where the heads' parts and W_O's bias do not add up to what the attention writes (`heads_add_up`:
        a norm after the attention, as in Gemma 2)."""
        b_o = self.projection(layer)[1]
        rebuilt = written.sum(axis=(0, 1)) + (0 if b_o is None else b_o)
        if not heads_add_up(rebuilt, self.trace[f"decoder.{layer}.hook_attn_out"][target]):
            raise UserError(f"{self.facts.model_id}: the heads of layer {layer} do not add up to what its attention "
                            "writes to the residual stream (a norm after the attention): no graph.")

    def _written(self, layer: int, target: int) -> np.ndarray:
        """(sources, heads, d_model): what each head writes at `target` from each source up to it: its pattern weight
        times the source's value through the head's rows of W_O."""
        row = self.trace.pattern_rows("decoder.attn", layer, [target])[:, 0]  # (heads, k_len): this row alone
        pattern = row[:, :target + 1].astype(np.float64)  # (heads, sources)
        values = self.trace[f"decoder.{layer}.attn.hook_v"][:, :target + 1].astype(np.float64)  # (kv, src, d_head)
        heads, kv = pattern.shape[0], values.shape[0]
        values = np.repeat(values, heads // kv, axis=0)  # (heads, src, d_head): query head h reads kv head h // group
        w_o = self.projection(layer)[0].astype(np.float64).reshape(heads, values.shape[-1], -1)  # (heads, d_head,
        # d_model)
        return np.einsum("hs,hsd,hdm->shm", pattern, values, w_o)
