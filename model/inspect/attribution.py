"""Direct logit attribution: how much each head, each MLP and the embeddings add, directly, to one logit (or to the
difference of two, " Mary" − " John") at one position, read from a run with the final norm's scale taken from that
run (TransformerLens's `apply_ln`: the component centred where the norm is a LayerNorm, divided by the scale, times the
norm's weight, onto the unembedding's direction).

The residual stream is a sum of what each part writes, so a norm whose scale is frozen at the run's value is linear
in it, and so is the unembedding: the logit splits exactly into the parts' shares plus constants (the norms' biases
and the unembedding's). Post-norm models (the paper's, BERT, BART) normalise the stream after every block: each
norm on the way from a part to the output is frozen at its own scale in the same way (a "direct" path crosses the
norms but no attention and no MLP). A head writes z · its rows of W_O (its value bias inside z, as pattern rows sum
to 1); the attention's output bias and each MLP (its biases included, as TransformerLens's `mlp_out`) are parts of
their own. Walking the stack backwards carries one direction in the stream (model/inspect/qk_parts.py, the walk that
splits an attention score too): each part's share is its value at the position · that direction. A hybrid's blocks of
other kinds (Mamba, delta-net, convolution, an MLP alone) are parts of their own, each its output less its input, and
so is what a block that adds attention scaled writes besides its heads (`L{l}.rest`: Granite's MLP, Falcon-H1's
Mamba and MLP); a head's write goes through the norm after attention, its scale frozen, where the block has one
(Gemma 2 and 3, OLMo 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.lens import Unembedding
from attention_atlas.model.inspect.offered import offered_hooks
from attention_atlas.model.inspect.qk_parts import stream_shares
from attention_atlas.model.inspect.readout import logit_map, unembedding_for
from attention_atlas.model.inspect.stream_parts import position_in, prediction_hook
from attention_atlas.model.inspect.stream_steps import Step, gated, stack_input, step_hooks, stream_hooks, walk_steps

SUM_TOLERANCE = 1e-3  # relative, float32: heads that do not add up to what their attention writes (a norm inside it),
# or parts that do not add up to the model's logit, are refused; 16-bit models: 4 epsilons of their dtype


@dataclass(frozen=True)
class Attribution:
    """Each part's direct share of the logit of `answer` (minus that of `wrong`, where given) at `position` of the
    decoder's sequence. Arrays (layers, heads) and (layers,); cross-attention only in an encoder-decoder."""

    answer: str
    wrong: str | None
    position: int
    token: str  # the token at that position (the prediction is of the one after it)
    heads: np.ndarray  # (layers, heads) each head's z through its rows of W_O
    attention_bias: np.ndarray  # (layers,) the attention output's bias
    cross_heads: np.ndarray | None  # (layers, heads) cross-attention heads (encoder-decoders), else None
    cross_bias: np.ndarray | None  # (layers,)
    mlp: np.ndarray  # (layers,) each MLP's output, its biases included; NaN where the block records no MLP output
    # apart (Granite's, Falcon-H1's: in `blocks`' L{l}.rest), 0 where it has none (Nemotron-H's attention blocks)
    embeddings: float  # the stack's input: token (and position) embeddings
    constant: float  # the norms' biases through to the output, and the unembedding's bias
    model_logit: float  # the model's own logit (difference), from its last layer's output through its readout
    softcap: float | None  # Gemma 2 caps logits (c tanh(x / c)): the parts add up to the logit before the cap
    blocks: dict[str, float] = field(default_factory=dict)  # the stream's other parts: a hybrid's blocks of other
    # kinds ("block 0 (Mamba)"), what a block that adds attention scaled writes besides its heads ("L1.rest")

    @property
    def total(self) -> float:
        """The sum of every part and the constant: the logit (difference) before any soft-capping."""
        parts = [self.heads, self.attention_bias, self.mlp, self.cross_heads, self.cross_bias]
        return float(sum(np.nansum(p) for p in parts if p is not None) + sum(self.blocks.values()) +
                     self.embeddings + self.constant)

    def ranked(self) -> list[tuple[str, int, int, float]]:
        """Every head as (site, layer, head, share), the largest share by size first."""
        grids = [("decoder.attn", self.heads), ("decoder.cross_attn", self.cross_heads)]
        rows = [(site, layer, head, float(value)) for site, grid in grids if grid is not None
                for (layer, head), value in np.ndenumerate(grid)]
        return sorted(rows, key=lambda row: -abs(row[3]))

    def as_dict(self) -> dict[str, Any]:
        """Every field, arrays as nested lists (JSON)."""
        return {name: value.tolist() if isinstance(value, np.ndarray) else value
                for name, value in vars(self).items()} | {"total": self.total}

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (a cache counts them)."""
        arrays = (self.heads, self.attention_bias, self.mlp, self.cross_heads, self.cross_bias)
        return sum(a.nbytes for a in arrays if a is not None)

    @property
    def layers(self) -> np.ndarray:
        """(layers,) each layer's share: its heads, its biases and its MLP."""
        out = self.heads.sum(1) + self.attention_bias + self.mlp
        if self.cross_heads is not None:
            out = out + self.cross_heads.sum(1) + self.cross_bias
        return out


def token_id(runner: Runner, text: str, what: str) -> int:
    """The one token `text` is (" Mary"); UserError naming the tokens it becomes otherwise."""
    tokenizer = getattr(runner, "text", None)
    if tokenizer is not None:  # a Hugging Face model
        ids = tokenizer.tokenizer(text, add_special_tokens=False)["input_ids"]
        spelled = tokenizer.tokens(ids)
    else:  # a from-scratch model: one token per character
        toy = runner.toy.tokenizer  # type: ignore[attr-defined]
        special = text in toy.vocab and len(text) > 1  # "</s>"
        ids = [toy.vocab.index(text)] if special else toy.encode(text, max_chars=max(len(text), 1), what=what) \
            if text else []
        spelled = toy.tokens(ids)
    if len(ids) != 1:
        became = " + ".join(repr(s) for s in spelled) if ids else "no token at all"
        raise UserError(f"The {what} {text!r} must be one token of {runner.facts.model_id}; it is {became}. "
                        "Choose a word that is one token (often with its leading space).")
    return int(ids[0])


def token_text(runner: Runner, token: int) -> str:
    """The text that is token `token` (" Mary"): what `token_id` reads back as that token."""
    tokenizer = getattr(runner, "text", None)
    if tokenizer is not None:
        return tokenizer.tokenizer.decode([token])
    return runner.toy.tokenizer.vocab[token]  # type: ignore[attr-defined]


def likeliest(runner: Runner, trace: Trace, position: int, k: int = 2) -> list[tuple[str, float]]:
    """The k likeliest next tokens at `position` of the decoder's sequence, as (text, probability), from a trace
    recorded with `attribution_options`."""
    unembedding = unembedding_for(runner)
    if isinstance(unembedding, str):
        raise UserError(unembedding)
    hook = prediction_hook(runner.facts, unembedding)
    refuse_missing(runner, trace, [hook])
    output = trace[hook][position]  # (d_model,)
    with torch.no_grad():
        probs = torch.softmax(unembedding.readout(torch.from_numpy(np.ascontiguousarray(output))[None])[0].double(), -1)
    top = torch.topk(probs, k)
    return [(token_text(runner, int(i)), float(p)) for p, i in zip(top.values, top.indices, strict=True)]


def attribution_options(runner: Runner) -> RunOptions:
    """What a run records for `attribute`: every head's z, what each block adds, every norm's scale, the stack's
    input, its last layer's output and what the prediction is read from."""
    facts = runner.facts
    output = unembedding_for(runner)
    read = () if isinstance(output, str) else (output.hook(facts.n_decoder_layers - 1), prediction_hook(facts, output))
    hooks = (*stream_hooks(runner, "decoder", facts.kind == "encoder-decoder", gated(runner, "decoder")), *read)
    return RunOptions(hooks=tuple(dict.fromkeys(hooks)))


def needed_hooks(runner: Runner, unembedding: Unembedding) -> list[str]:
    """Every hook `attribute` reads: the stack's input, each head's z, what each block writes, the readout's input,
    and the scale of each norm on the way to the output (a post-norm model's in every block; the final norm's where
    the model has one)."""
    facts = runner.facts
    names, scales = [stack_input(facts, "decoder"), prediction_hook(facts, unembedding)], []
    gates = gated(runner, "decoder")
    for step in reversed(_steps(facts)):  # the stream's order: what each block writes, then the norms' scales
        kind, where = step
        if kind != "norm":
            names += step_hooks(runner, step, gates)
        elif not where.endswith("ln_final") or f"{where}.hook_scale" in offered_hooks(runner):
            scales.append(f"{where}.hook_scale")
    return names + scales


def refuse_missing(runner: Runner, trace: Trace, names: list[str]) -> None:
    """UserError naming the hooks of `names` that the trace lacks (each layer's as one pattern): those the model's
    layout has no place for (its blocks' sums could not be shown, as in a post-norm OPT), else those the run did not
    record."""
    missing = [name for name in names if name not in trace]
    absent = [name for name in missing if name not in offered_hooks(runner)]
    shown = ", ".join(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", name) for name in absent or missing))
    if absent:
        raise UserError(f"{runner.facts.model_id} ({runner.facts.norm}) has no {shown} here: direct logit "
                        "attribution reads what each block writes to the residual stream and the scale of each norm "
                        "on the way to the output, so this model's logit cannot be split into parts.")
    if missing:
        raise UserError(f"This run of {runner.facts.model_id} did not record {shown}: direct logit attribution "
                        "reads what each block writes and the scale of each norm on the way to the output (a norm "
                        "whose scale is not known cannot be crossed). Record the run with attribution_options.")


def attribute(runner: Runner, trace: Trace, answer: str, wrong: str | None = None, position: int = -1) -> Attribution:
    """Direct logit attribution at `position` of the decoder's sequence (-1: the next token's prediction), from a
    `trace` recorded with `attribution_options`. UserError where the model has no next-token readout, the trace lacks
    a hook it reads (`refuse_missing`), or the parts do not add up (to a layer's or block's or the model's output)."""
    facts = runner.facts
    if facts.kind == "encoder":
        raise UserError(f"{facts.model_id} is an encoder: it reads the whole text at once and predicts no next token, "
                        "so there is no logit to attribute. Choose a causal language model (SmolLM2, toy-gpt-date).")
    unembedding = unembedding_for(runner)
    if isinstance(unembedding, str):
        raise UserError(unembedding)
    ids = [token_id(runner, answer, "answer")] + ([token_id(runner, wrong, "wrong answer")] if wrong else [])
    length = len(trace.target_ids if facts.kind == "encoder-decoder" else trace.ids)
    p = position_in(position, length)
    refuse_missing(runner, trace, needed_hooks(runner, unembedding))
    readout = logit_map(runner, ids)
    sign = np.array([1.0, -1.0][:len(ids)])
    direction = sign @ readout.directions  # (d_model,) float64
    split = stream_shares(runner, trace, _steps(facts), "decoder", np.array([p]), np.ones((1, 1)), direction[None],
                          heads_add_up)
    shares = dict(zip(split.names, split.shares[:, 0].tolist(), strict=True))
    layers = facts.n_decoder_layers
    heads = np.array([[shares.pop(f"L{layer}H{head}") for head in range(facts.n_heads)] for layer in range(layers)])
    bias, mlp = (np.array([shares.pop(f"L{layer}.{name}", 0.0) for layer in range(layers)])
                 for name in ("attn_bias", "mlp"))
    mlp[[f"L{layer}.rest" in shares for layer in range(layers)]] = np.nan  # its MLP is in the rest
    cross = None
    if facts.kind == "encoder-decoder":
        cross = (np.array([[shares.pop(f"L{layer}.cross.H{head}") for head in range(facts.n_heads)]
                           for layer in range(layers)]),
                 np.array([shares.pop(f"L{layer}.cross_attn_bias", 0.0) for layer in range(layers)]))
    embeddings = shares.pop("embed") + shares.pop("pos_embed", 0.0)
    output = trace[prediction_hook(facts, unembedding)][p]  # (d_model,) the stack's output, as the readout reads it
    with torch.no_grad():
        logits = unembedding.readout(torch.from_numpy(np.ascontiguousarray(output))[None])[0, ids].double().numpy()
    tokens = trace.target_tokens if facts.kind == "encoder-decoder" else trace.tokens
    found = Attribution(answer, wrong, p, tokens[p], heads, bias, *(cross or (None, None)), mlp, embeddings,
                        float(sign @ readout.constants + split.bias[0]), float(sign @ logits), readout.softcap, shares)
    refuse_wrong_sum(found, logits, facts.precision)
    return found


def refuse_wrong_sum(found: Attribution, logits: np.ndarray, precision: str) -> None:
    """UserError where the parts of `found` do not add up to the model's own logit (difference) before any cap, from
    the model's `logits` (tokens,) of the answer (and the wrong answer): beyond SUM_TOLERANCE (16-bit: 4 epsilons of
    the dtype) of the larger of 1, the parts' sizes summed and the logits' sizes summed."""
    cap = found.softcap
    uncapped = cap * np.arctanh(np.clip(logits / cap, -1 + 1e-7, 1 - 1e-7)) if cap else logits
    model = float(np.array([1.0, -1.0][:len(logits)]) @ uncapped)
    parts = [found.heads, found.attention_bias, found.mlp, found.cross_heads, found.cross_bias,
             np.array(list(found.blocks.values()))]
    size = sum(float(np.nansum(np.abs(part))) for part in parts if part is not None) + abs(found.embeddings) \
        + abs(found.constant)
    scale = max(1.0, size, float(np.abs(uncapped).sum()))
    epsilon = float(torch.finfo(getattr(torch, precision)).eps)
    if not abs(found.total - model) <= max(SUM_TOLERANCE, 4 * epsilon) * scale:  # NaN too
        raise UserError(f"The parts add up to {found.total:+.3f}, but the model's own logit "
                        f"{'difference ' if found.wrong else ''}is {model:+.3f}: something on the way to the output "
                        "is not a part this split knows (a norm whose scale was not recorded, a scaled sum), so no "
                        "split is shown rather than a wrong one.")


def heads_add_up(rebuilt: np.ndarray, written: np.ndarray) -> bool:
    """Whether what the heads write, summed with W_O's bias, `rebuilt` (..., d_model), is what the attention writes to
    the stream, `written` (..., d_model), within SUM_TOLERANCE of its largest entry (at least 1): not where a norm
    lies inside the attention's output (Gemma 2)."""
    return bool(np.abs(rebuilt - written).max() <= SUM_TOLERANCE * max(float(np.abs(written).max()), 1.0))


def _steps(facts: ModelFacts) -> list[Step]:
    """What lies between the embeddings and what the readout reads: the final norm, each layer's (or block's) parts."""
    return walk_steps(facts, "decoder", facts.n_decoder_layers, "output", facts.kind == "encoder-decoder")
