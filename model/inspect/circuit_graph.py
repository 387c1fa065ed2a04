"""The computational graph of a circuit, as the EAP-IG library (hannamw/EAP-IG, `eap/graph.py`) draws it: nodes
`input`, each attention head `a{layer}.h{head}`, each MLP `m{layer}` and `logits`; an edge from every node to every
later node's input through the residual stream. A head has three inputs (its query, key and value read the stream
apart: `input->a1.h2<q>`), an MLP and the logits one (`a0.h3->m0`, `m2->logits`); a head's edges come from every node
before its layer, an MLP's from those and its own layer's heads (a pre-norm block: attention, then the MLP).

Sources (nodes whose output joins the stream) and destinations (inputs read from it) are numbered as the library
numbers them (its `forward_index` and `backward_index`), so an edge is a (source, destination) pair of a matrix.
`top_n` and `prune` are its `apply_topn(n, absolute=True)` and `prune`: the n edges of largest |score|, then edges
whose node reaches neither the input nor the logits dropped until nothing changes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attention_atlas.model.core.errors import UserError

LETTERS = "qkv"


@dataclass(frozen=True)
class CircuitGraph:
    """The graph of a pre-norm decoder of `n_layers` layers of `n_heads` heads."""

    n_layers: int
    n_heads: int

    @cached_property
    def sources(self) -> list[str]:
        """Every node whose output joins the stream, in the library's forward order."""
        names = ["input"]
        for layer in range(self.n_layers):
            names += [f"a{layer}.h{head}" for head in range(self.n_heads)] + [f"m{layer}"]
        return names

    @cached_property
    def destinations(self) -> list[str]:
        """Every input read from the stream, in the library's backward order: each layer's query, key and value
        inputs (each head's), its MLP, then the logits."""
        names = []
        for layer in range(self.n_layers):
            names += [f"a{layer}.h{head}<{letter}>" for letter in LETTERS for head in range(self.n_heads)]
            names.append(f"m{layer}")
        return [*names, "logits"]

    def attention_sources(self, layer: int) -> slice:
        """The sources `layer`'s heads are (their forward indices)."""
        start = 1 + layer * (self.n_heads + 1)
        return slice(start, start + self.n_heads)

    def mlp_source(self, layer: int) -> int:
        return 1 + layer * (self.n_heads + 1) + self.n_heads

    def attention_inputs(self, layer: int) -> slice:
        """`layer`'s 3 x heads destinations (q of every head, then k, then v)."""
        start = layer * (3 * self.n_heads + 1)
        return slice(start, start + 3 * self.n_heads)

    def mlp_input(self, layer: int) -> int:
        return layer * (3 * self.n_heads + 1) + 3 * self.n_heads

    @property
    def logits_input(self) -> int:
        return len(self.destinations) - 1

    def before(self, destination: int) -> int:
        """How many sources (the first ones) feed `destination`: the library's `prev_index`."""
        if destination == self.logits_input:
            return len(self.sources)
        layer, within = divmod(destination, 3 * self.n_heads + 1)
        return 1 + layer * (self.n_heads + 1) + (self.n_heads if within == 3 * self.n_heads else 0)

    @cached_property
    def real(self) -> np.ndarray:
        """(sources, destinations) bool: which pairs are edges."""
        fed = np.array([self.before(d) for d in range(len(self.destinations))])
        return np.arange(len(self.sources))[:, None] < fed[None, :]

    @cached_property
    def edges(self) -> list[str]:
        """Every edge's name, in the library's order of adding them (`edge_index`)."""
        return [f"{self.sources[s]}->{self.destinations[d]}" for s, d in zip(*self.edge_index, strict=True)]

    @cached_property
    def edge_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(edges,) source and (edges,) destination index of each edge, in the library's order of adding them: for
        each layer, every earlier node to each head's q, k and v, then to the MLP; last, every node to the logits."""
        order: list[tuple[int, int]] = []
        for layer in range(self.n_layers):
            inputs = self.attention_inputs(layer)
            order += [(s, inputs.start + i * self.n_heads + head) for s in range(self.attention_sources(layer).start)
                      for head in range(self.n_heads) for i in range(3)]
            order += [(s, self.mlp_input(layer)) for s in range(self.mlp_source(layer))]
        order += [(s, self.logits_input) for s in range(len(self.sources))]
        return np.array([s for s, _ in order]), np.array([d for _, d in order])

    @cached_property
    def position(self) -> dict[str, int]:
        """Edge name -> its index in `edges`."""
        return {name: i for i, name in enumerate(self.edges)}

    @cached_property
    def owner(self) -> np.ndarray:
        """(destinations,) the source index of the node each destination is the input of (logits: -1)."""
        found = np.full(len(self.destinations), -1)
        for layer in range(self.n_layers):
            heads = self.attention_sources(layer)
            found[self.attention_inputs(layer)] = np.tile(np.arange(heads.start, heads.stop), 3)
            found[self.mlp_input(layer)] = self.mlp_source(layer)
        return found

    def matrix(self, edges: list[str] | set[str]) -> np.ndarray:
        """(sources, destinations) bool: these edges; UserError naming one that is not an edge of this graph."""
        kept = np.zeros(self.real.shape, bool)
        for name in edges:
            if name not in self.position:
                raise UserError(f"{name!r} is not an edge of this model's graph (edges look like 'input->a0.h1<q>', "
                                f"'a0.h2->m1', 'm{self.n_layers - 1}->logits').")
            i = self.position[name]
            kept[self.edge_index[0][i], self.edge_index[1][i]] = True
        return kept

    def names(self, kept: np.ndarray) -> list[str]:
        """The edges of a (sources, destinations) bool matrix, in `edges`' order."""
        return [name for name, s, d in zip(self.edges, *self.edge_index, strict=True) if kept[s, d]]

    def prune(self, kept: np.ndarray) -> np.ndarray:
        """The library's `prune`: drop nodes with no edge in or no edge out (the input counts as fed, the logits as
        read), then edges whose source or destination's node was dropped, until nothing changes."""
        kept = kept.copy()
        while True:
            fed = np.zeros(len(self.sources), bool)
            fed[self.owner[kept.any(0) & (self.owner >= 0)]] = True
            fed[0] = True
            alive = kept.any(1) & fed
            reachable = np.append(alive[self.owner[:-1]], True)  # each destination's node; the logits always
            pruned = kept & alive[:, None] & reachable[None, :]
            if (pruned == kept).all():
                return pruned
            kept = pruned

    def top_n(self, scores: np.ndarray, n: int) -> np.ndarray:
        """(sources, destinations) bool: the n edges of largest |score| (`scores` (edges,) in `edges`' order), pruned;
        UserError for n outside 0 .. the number of edges."""
        if not 0 <= n <= len(self.edges):
            raise UserError(f"This graph has {len(self.edges):,} edges: choose between 0 and that many, not {n}.")
        chosen = np.argsort(-np.abs(scores), kind="stable")[:n]
        kept = np.zeros(self.real.shape, bool)
        kept[self.edge_index[0][chosen], self.edge_index[1][chosen]] = True
        return self.prune(kept)
