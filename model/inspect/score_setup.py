"""What splitting one head's scores reads: the run's hooks (`score_options`), the head's weights, what its query and
its keys read, the model's own scores, and each side's parts (model/inspect/qk_parts.py through
model/inspect/qk_sides.py). model/inspect/score_parts.py puts them together."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import as_tensor
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import heads_add_up
from attention_atlas.model.inspect.head_weights import HeadWeights, head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.qk_latent import latent_side
from attention_atlas.model.inspect.qk_parts import stream_shares
from attention_atlas.model.inspect.qk_sides import Side, side_of
from attention_atlas.model.inspect.stream_parts import position_in
from attention_atlas.model.inspect.stream_steps import (
    Step,
    gated,
    input_hook,
    stack_input,
    step_hooks,
    stream_hooks,
    walk_steps,
)


@dataclass(frozen=True)
class Reader:
    """One side's stream: the stack it runs down, the steps from what reads it down to the embeddings, the hook of
    what the attention reads, and how its parts are named."""

    stack: str
    steps: list[Step]
    hook: str
    prefix: str = ""


def readers(runner: Runner, site: str, layer: int) -> tuple[Reader, Reader]:
    """The query's and the keys' streams of the attention at `site` and `layer` (cross-attention: the decoder's
    stream read by its cross-attention, and the encoder's output)."""
    facts, where = runner.facts, Site.of(site)
    crossing = where.stack == "decoder" and facts.kind == "encoder-decoder"
    reading = "cross_query" if where.is_cross else "attn"
    layers = facts.n_decoder_layers if where.stack == "decoder" else facts.n_encoder_layers
    query = Reader(where.stack, walk_steps(facts, where.stack, layer, reading, crossing),
                   input_hook(runner, where.stack, layer, reading, layers))
    if not where.is_cross:
        return query, query
    encoder = facts.n_encoder_layers
    return query, Reader("encoder", walk_steps(facts, "encoder", encoder, "output", False),
                         input_hook(runner, "encoder", encoder, "output", encoder), "encoder.")


def score_options(runner: Runner, site: str, layer: int) -> RunOptions:
    """What a run records for splitting the scores at `site` and `layer`: every hook each side's walk reads, what
    the attention reads, and its pattern (a Hugging Face model keeps the queries and keys the scores were computed
    from; a from-scratch model records its scores)."""
    facts, where = runner.facts, Site.of(site)
    crossing = where.stack == "decoder" and facts.kind == "encoder-decoder"
    hooks = stream_hooks(runner, where.stack, crossing, gated(runner, where.stack))
    hooks += stream_hooks(runner, "encoder", False, gated(runner, "encoder")) if where.is_cross else []
    hooks += [reader.hook for reader in readers(runner, site, layer)]
    hooks.append(where.pattern_name(layer))
    if getattr(runner, "model", None) is None:  # a from-scratch model: no kept queries and keys, its scores
        hooks.append(f"{where.stack}.{layer}.{where.kind}.hook_attn_scores")
    return RunOptions(hooks=tuple(dict.fromkeys(hooks)))



@dataclass(frozen=True)
class HeadSetup:
    """One head's query row and keys, ready to split."""

    runner: Runner
    trace: Trace
    layer: int
    query: int
    keys: np.ndarray  # (n,) key positions
    query_tokens: list[str]
    key_tokens: list[str]
    weights: HeadWeights
    readers: tuple[Reader, Reader]
    q_side: Side  # at the query's position
    k_side: Side  # at each key's
    x_k: np.ndarray  # (n, d_model) what the keys read
    q_whole: np.ndarray  # (1, d_head) what the scores read for the query
    k_whole: np.ndarray  # (n, d_head) and for each key
    recorded: np.ndarray  # (n,) the model's own scores, before soft-capping and the mask
    probabilities: np.ndarray  # (n,) the pattern's
    position_bias: np.ndarray  # (n,)
    position_bias_name: str | None

    def query_vectors(self) -> tuple[list[str], np.ndarray]:
        """(names, (parts, d_head)): each part's share of what the scores read for the query, `bias` last."""
        return self._vectors(self.readers[0], self.q_side, self.query)

    def key_vectors(self, key: int) -> tuple[list[str], np.ndarray]:
        """The same for the key at position `key` (one of `keys`)."""
        c = int(np.flatnonzero(self.keys == key)[0])
        side = _side(self.weights, "k", self.x_k[[c]], np.array([key]))
        return self._vectors(self.readers[1], side, key)

    def key_shares(self, u: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(names, (parts, n)): each part's key at every key's position · u (d_head,), `bias` last."""
        coefficients, constant = self.k_side.back(np.broadcast_to(u, (len(self.keys), len(u))))
        found = stream_shares(self.runner, self.trace, self.readers[1].steps, self.readers[1].stack, self.keys,
                              coefficients, self.k_side.w.T, heads_add_up, self.readers[1].prefix)
        return [*found.names, "bias"], np.vstack([found.shares, found.bias + constant])

    def _vectors(self, reader: Reader, side: Side, position: int) -> tuple[list[str], np.ndarray]:
        d_head = side.w.shape[1]
        coefficients, constant = side.back(np.eye(d_head))  # row r: what the scores read's r-th number
        found = stream_shares(self.runner, self.trace, reader.steps, reader.stack, np.full(d_head, position),
                              coefficients, side.w.T, heads_add_up, reader.prefix)
        return [*found.names, "bias"], np.vstack([found.shares, found.bias + constant])


def setup_head(runner: Runner, trace: Trace, site: str, layer: int, head: int, query: int,
               keys: list[int] | None) -> HeadSetup:
    """The setup of `head` at `query` and `keys` (None: every key the mask lets it see). UserError for a site, layer,
    head or position outside the run, a key the mask hides, or a hook the model's layout does not offer."""
    facts = runner.facts
    if site not in trace.masks:
        raise UserError(f"{facts.model_id} has no attention site {site!r} in this run; its sites: "
                        f"{', '.join(trace.masks)}.")
    where = Site.of(site)
    if not 0 <= layer < trace.n_layers(site):
        raise UserError(f"Layer {layer} is outside the {trace.n_layers(site)} layers of {site}.")
    if not 0 <= head < facts.n_heads:
        raise UserError(f"Head {head} is outside the {facts.n_heads} heads of {site}.")
    query_tokens, key_tokens = trace.query_tokens(site), trace.key_tokens(site)
    i = position_in(query, len(query_tokens))
    source = trace.pattern_source(site, layer)  # the mask this layer applied (its sliding window too)
    allowed = np.asarray((trace.masks[site] if source is None else source.allowed)[i], bool)  # (k_len,)
    if keys is None:
        chosen = np.flatnonzero(allowed)
    else:
        chosen = np.array([position_in(k, len(key_tokens)) for k in keys])
        hidden = [int(k) for k in chosen if not allowed[k]]
        if hidden:
            raise UserError(f"The query at {i} ({query_tokens[i]!r}) cannot see the key at {hidden[0]} "
                            f"({key_tokens[hidden[0]]!r}): the mask hides it, so the model used no score there.")
    weights = head_weights(runner, site, layer, head, len(query_tokens), len(key_tokens), source)
    both = readers(runner, site, layer)
    _refuse_missing(runner, trace, both)
    x_q = _read(runner, trace, both[0].hook, np.array([i]))
    x_k = _read(runner, trace, both[1].hook, chosen)
    q_side, k_side = _side(weights, "q", x_q, np.array([i])), _side(weights, "k", x_k, chosen)
    bias = np.zeros(len(chosen)) if weights.position_bias is None else \
        weights.position_bias[i, chosen].astype(np.float64)
    probabilities = trace.pattern_rows(site, layer, [i], heads=[head])[0, 0, chosen].astype(np.float64)
    return HeadSetup(runner, trace, layer, i, chosen, query_tokens, key_tokens, weights, both, q_side, k_side, x_k,
                     q_side.read(x_q), k_side.read(x_k), _recorded(trace, where, layer, head, i, chosen),
                     probabilities, bias, None if weights.position_bias is None else
                     f"position bias ({facts.positional})")


def _read(runner: Runner, trace: Trace, hook: str, positions: np.ndarray) -> np.ndarray:
    """(n, d_model) float64: what the attention reads at `positions`, from `hook` (a norm's output from its
    `hook_normalized`)."""
    return block_input(runner, hook, trace[hook][positions]).astype(np.float64)


def _side(weights: HeadWeights, which: str, x: np.ndarray, positions: np.ndarray) -> Side:
    """The query ("q") or key ("k") side of the head for x (n, d_model) at `positions` (qk_sides, qk_latent)."""
    return (latent_side if weights.latent is not None else side_of)(weights, which, x, positions)  # type: ignore[arg-type]

def _recorded(trace: Trace, where: Site, layer: int, head: int, i: int, keys: np.ndarray) -> np.ndarray:
    """(n,) the model's own scores of `head` from query i to `keys`: from the queries and keys its attention read,
    its scale and bias, before any soft-capping (a Hugging Face model's kept pattern source); or its recorded
    scores (a from-scratch model)."""
    source = trace.pattern_source(where.name, layer)
    if source is None:
        return trace[f"{where.stack}.{layer}.{where.kind}.hook_attn_scores"][head, i, keys].astype(np.float64)
    query, key = (as_tensor(a, torch.device("cpu")) for a in (source.query, source.key))  # (bfloat16 kept as bits)
    group = len(query) // len(key)
    scores = source.scale * key[head // group, keys].double().numpy() @ query[head, i].double().numpy()  # (n,)
    if source.bias is not None:
        bias = np.broadcast_to(np.asarray(source.bias), (len(query), *source.shape[1:]))
        scores = scores + bias[head, i, keys]
    return scores


def _refuse_missing(runner: Runner, trace: Trace, both: tuple[Reader, Reader]) -> None:
    """UserError naming the hooks each side's walk reads that this run lacks (each layer's as one pattern)."""
    needed = []
    for reader in both:
        needed += [reader.hook, stack_input(runner.facts, reader.stack)]
        gates = gated(runner, reader.stack)
        for step in reader.steps:
            needed += step_hooks(runner, step, gates)
    missing = [name for name in dict.fromkeys(needed) if name not in trace]
    if missing:
        shown = ", ".join(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", name) for name in missing))
        raise UserError(f"{runner.facts.model_id} ({runner.facts.norm}): this run holds no {shown}. Splitting a score "
                        "reads what each block writes to the residual stream and what the attention reads; a model "
                        "whose layout has no place for them (its blocks' sums cannot be shown) cannot be split.")
