"""One batched pass of a pre-norm decoder run as a circuit's graph: every node's output recorded as it is made (the
input: what the first block reads; each head: its z through its rows of W_O; each MLP: what it adds), and every
destination reading the residual stream plus what `Wiring.added` gives it — each head's query, key and value through
the heads computed again with inputs of their own (model/inspect/circuit_heads.py, the model's z replaced), each MLP
through its own input (what its norm alone reads), the logits through the last block's output. How a kind of model
runs with those edits is its `GraphForward`: a Hugging Face decoder's (model/inspect/circuit_hf.py) or a from-scratch
pre-norm toy's (model/inspect/circuit_scratch.py); either edits for the calling thread alone.

`check=True` proves the graph on the run: the heads computed again equal the model's z, and the stream adds up —
what each layer's attention adds is its heads' outputs plus W_O's bias, what its MLP adds is the MLP's output; a model
where either fails is refused (`graph_forward` refuses those whose layout is known not to fit before any run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from attention_atlas.model.core.capture.hooks import Edit
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.circuit_graph import CircuitGraph
from attention_atlas.model.inspect.circuit_heads import LayerHeads, layer_heads
from attention_atlas.model.inspect.circuit_hf import HFGraphForward
from attention_atlas.model.inspect.circuit_scratch import ScratchGraphForward
from attention_atlas.model.inspect.stream_parts import refuse_other_layers

SUM_TOLERANCE = 1e-3  # relative to the stream's largest entry (at least 1): what a layer adds must be its nodes'


class Wiring(Protocol):
    def added(self, destinations: slice | int, sources: torch.Tensor) -> torch.Tensor | None:
        """What the destinations read on top of the stream: (batch, 3 x heads, len, d_model) for a layer's query, key
        and value inputs (every head's q, then k, then v), (batch, len, d_model) for an MLP or the logits; None:
        nothing. `sources` (batch, sources before them, len, d_model): those nodes' outputs in this pass."""
        ...


class GraphForward(Protocol):
    """How a kind of decoder runs as its graph."""

    runner: Runner
    mlp_in: str  # the hook (after `decoder.{layer}.`) whose edit is what the MLP alone reads

    @property
    def device(self) -> torch.device: ...

    def encode(self, text: str) -> list[int]:
        """A text's token ids, as the model reads a prompt."""
        ...

    def tokens(self, ids: list[int]) -> list[str]: ...

    def logits(self, ids: torch.Tensor, edits: dict[str, Edit]) -> torch.Tensor:
        """(batch, vocab) float32 after the last token of `ids` (batch, len), the hooks (by name) edited: the logits,
        or log-probabilities (their differences are the logits')."""
        ...


@dataclass
class GraphModel:
    """A decoder ready to run as its graph on texts of `length` tokens: its heads computed again, layer by layer."""

    forward: GraphForward
    graph: CircuitGraph
    heads: list[LayerHeads]
    length: int

    @property
    def runner(self) -> Runner:
        return self.forward.runner

    @property
    def device(self) -> torch.device:
        return self.forward.device


@dataclass
class PassResult:
    metric: torch.Tensor  # (batch,) the logit difference answer − wrong after the last token
    sources: torch.Tensor  # (batch, sources, len, d_model) float32, detached: every node's output


def graph_model(forward: GraphForward, length: int) -> GraphModel:
    """The decoder `forward` runs, as its graph for texts of `length` tokens."""
    runner = forward.runner
    facts = runner.facts
    heads = [layer_heads(runner, layer, length, forward.device) for layer in range(facts.n_decoder_layers)]
    return GraphModel(forward, CircuitGraph(facts.n_decoder_layers, facts.n_heads), heads, length)


def graph_forward(runner: Runner) -> GraphForward:
    """How `runner`'s decoder runs as its graph; UserError for a model whose residual stream is not the circuit's
    graph: an encoder or encoder-decoder, a hybrid, a block that is not pre-norm attention then MLP (a post-norm
    toy among them), or a model without the hooks the graph edits."""
    facts = runner.facts
    toy = getattr(runner, "model", None) is None  # a from-scratch model (model/toy/runner.py)
    if facts.kind != "decoder":
        raise UserError(f"{facts.model_id} is an {facts.kind}: the circuit's graph (the EAP-IG library's) is a "
                        "decoder's, from the input through its heads and MLPs to the next token's logits. Choose a "
                        "causal language model.")
    refuse_other_layers(facts, "a circuit's graph")
    if toy and facts.norm != "pre-norm":
        raise UserError(f"{facts.model_id} is a from-scratch toy: circuits are found in Hugging Face decoders and in "
                        f"pre-norm toys (toy-induction) here, and its blocks are {facts.norm}: a norm after each "
                        "residual sum, so the stream is not the sum of every node's output that the circuit's graph "
                        "splits it into. Choose toy-induction, SmolLM2 or another causal LM.")
    if not toy and facts.norm not in ("pre-norm (LayerNorm)", "pre-norm (RMSNorm)"):
        raise UserError(f"{facts.model_id}'s blocks are {facts.norm}: the circuit's graph needs each block to read "
                        "the stream through a norm, add its attention, then read it again for its MLP and add that "
                        "(pre-norm, one after the other), so that the stream is the sum of every node's output.")
    return ScratchGraphForward(runner) if toy else HFGraphForward(runner)


def run_graph(model: GraphModel, ids: torch.Tensor, wiring: Wiring | None, answer: int, wrong: int,
              start: torch.Tensor | None = None, check: bool = False) -> PassResult:
    """One pass over `ids` (batch, len), each destination reading what `wiring` adds (None: nothing), the first block
    reading `start` (batch, len, d_model) instead of the embeddings where given. Gradients flow where the caller
    enabled them (`wiring` may hand out tensors that need them). `check`: prove the graph on this pass."""
    graph, runner = model.graph, model.runner
    batch, length = ids.shape
    sources = torch.zeros(batch, len(graph.sources), length, runner.facts.d_model, device=model.device)
    stream: dict[str, torch.Tensor] = {}  # "x{l}": what block l reads; "mid{l}": the stream its MLP's norm reads
    done: set[str] = set()

    def extra(destinations: slice | int) -> torch.Tensor | None:
        first = destinations.start if isinstance(destinations, slice) else destinations
        return None if wiring is None else wiring.added(destinations, sources[:, :graph.before(first)])

    def add(destinations: int, value: torch.Tensor) -> torch.Tensor:
        more = extra(destinations)
        return value if more is None else value + more.to(value.device, value.dtype)

    def block_input(layer: int) -> Edit:
        def edit(value: torch.Tensor) -> torch.Tensor:
            if layer == 0 and start is not None:
                value = start.to(value.device, value.dtype)
            if layer == 0:
                sources[:, 0] = value.detach().float().to(sources.device)
            elif check:
                _adds_up(runner, f"MLP {layer - 1}", value - stream[f"mid{layer - 1}"],
                         sources[:, graph.mlp_source(layer - 1)], value)
            stream[f"x{layer}"] = value
            done.add(f"x{layer}")
            return value
        return edit

    def heads(layer: int) -> Edit:
        def edit(z: torch.Tensor) -> torch.Tensor:  # (batch, heads, len, d_head)
            x = stream[f"x{layer}"].to(model.device)[:, None]  # (batch, 1, len, d_model)
            more = extra(graph.attention_inputs(layer))  # (batch, 3 x heads, len, d_model) or None
            inputs = (x, x, x) if more is None else (x + more).chunk(3, 1)
            computed = model.heads[layer].z(*inputs)
            if check:
                model.heads[layer].matches(computed, z.to(computed.device), runner.facts.precision)
            sources[:, graph.attention_sources(layer)] = model.heads[layer].results(computed).detach()
            done.add(f"z{layer}")
            return computed.to(z.device, z.dtype)
        return edit

    def mlp_input(layer: int) -> Edit:
        def edit(value: torch.Tensor) -> torch.Tensor:
            if check:
                written = sources[:, graph.attention_sources(layer)].sum(1) + model.heads[layer].b["o"]
                _adds_up(runner, f"attention {layer}", value - stream[f"x{layer}"], written, value)
            stream[f"mid{layer}"] = value
            done.add(f"mid{layer}")
            return add(graph.mlp_input(layer), value)
        return edit

    def mlp_output(layer: int) -> Edit:
        def edit(value: torch.Tensor) -> torch.Tensor:
            sources[:, graph.mlp_source(layer)] = value.detach().float().to(sources.device)  # a spread model
            done.add(f"m{layer}")
            return value
        return edit

    def logits_input(value: torch.Tensor) -> torch.Tensor:
        last = graph.n_layers - 1
        if check:
            _adds_up(runner, f"MLP {last}", value - stream[f"mid{last}"], sources[:, graph.mlp_source(last)], value)
        done.add("logits")
        return add(graph.logits_input, value)

    edits: dict[str, Edit] = {}
    for layer in range(graph.n_layers):
        prefix = f"decoder.{layer}"
        edits |= {f"{prefix}.hook_resid_pre": block_input(layer), f"{prefix}.attn.hook_z": heads(layer),
                  f"{prefix}.{model.forward.mlp_in}": mlp_input(layer), f"{prefix}.hook_mlp_out": mlp_output(layer)}
    edits[f"decoder.{graph.n_layers - 1}.hook_resid_post"] = logits_input
    logits = model.forward.logits(ids, edits)  # (batch, vocab)
    if len(done) != 4 * graph.n_layers + 1:
        raise UserError(f"{runner.facts.model_id}'s pass did not go through every edit of the circuit's graph (its "
                        "attention computed elsewhere than the app's attention function): no circuit can be found.")
    return PassResult(logits[:, answer] - logits[:, wrong], sources)


def _adds_up(runner: Runner, part: str, added: torch.Tensor, written: torch.Tensor, stream: torch.Tensor) -> None:
    """UserError where what the stream gained at `part` (batch, len, d_model) is not what its nodes `written` add."""
    epsilon = float(torch.finfo(getattr(torch, runner.facts.precision)).eps)
    size = max(float(stream.detach().abs().max()), 1.0)
    error = float((added.detach().float() - written.to(added.device)).abs().max())
    if not error <= max(SUM_TOLERANCE, 8 * epsilon) * size:  # NaN too
        raise UserError(f"In {runner.facts.model_id}, what {part} adds to the residual stream differs from its nodes' "
                        f"outputs by {error:.3g} (of {size:.3g}): the stream is not the sum the circuit's graph "
                        "splits it into (a scaled sum, a norm on the way), so no circuit is found rather than a wrong "
                        "one.")
