"""What each part of the residual stream adds along given directions of an attention layer's input: the stream that a
layer reads is the sum of the embeddings, every earlier head's z · W_O, each attention's output bias and each MLP's
output (its biases inside), and a norm whose scale is frozen at the run's value is linear in it.

One direction a row, each at its own position, is carried from the attention's input back down the stack (as direct
logit attribution carries one, model/inspect/attribution.py): across a norm (out = centre(x) / scale x gain + bias)
the direction becomes gain x direction / scale, centred for a LayerNorm, and the bias's share joins `bias`; a part's
share is its value at the row's position · the row's direction. Post-norm models cross every norm on the way.

Parts are named `embed` and `pos_embed` (where the token and position embeddings add up to the stack's input, else
`embed` is that input whole: an embedding norm), `L{l}H{h}` (a head's z · its rows of W_O), `L{l}.attn_bias` (b_O),
`L{l}.cross.H{h}` and `L{l}.cross_attn_bias` (an encoder-decoder's cross-attention), `L{l}.mlp`; a stack's parts read
by another stack's attention (cross-attention's keys) are prefixed by it: `encoder.L0H1`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import heads_add_up
from attention_atlas.model.inspect.head_weights import output_projection
from attention_atlas.model.inspect.norm_output import norm_affine, norm_centres, norm_module

Reading = Literal["attn", "cross_query", "output"]  # what reads the stream: self-attention at a layer, the
# cross-attention's queries at a layer, or what the stack hands on (its output: the cross-attention's keys)
Step = tuple[Literal["norm", "attn", "cross", "mlp"], str]  # (kind, hook prefix: "decoder.3.ln1", "decoder.3")
CHECKED = 32  # positions at which a layer's heads are checked to add up to what its attention writes


@dataclass(frozen=True)
class StreamShares:
    """Each part's share along each direction: `shares` (parts, n) in the order of `names`; `bias` (n,) the norms'
    biases on the way."""

    names: list[str]
    shares: np.ndarray
    bias: np.ndarray


def stream_hooks(stack: str, cross: bool) -> list[str]:
    """Glob patterns of every hook a walk down `stack` reads (cross: its layers have cross-attention)."""
    hooks = [f"{stack}.hook_embed", f"{stack}.hook_pos_embed", f"{stack}.0.hook_resid_pre", f"{stack}.*.hook_scale",
             f"{stack}.*.attn.hook_z", f"{stack}.*.hook_attn_out", f"{stack}.*.hook_mlp_out"]
    return hooks + ([f"{stack}.*.cross_attn.hook_z", f"{stack}.*.hook_cross_attn_out"] if cross else [])


def input_hook(post_norm: bool, stack: str, layer: int, reading: Reading, n_layers: int) -> str:
    """The hook holding what reads the stream there: a norm's `hook_normalized` (its output: ×gain + bias), or the
    stream itself (a post-norm model's self-attention reads the layer's input, already normalised)."""
    if reading == "output":
        return f"{stack}.{n_layers - 1}.hook_normalized_resid_post" if post_norm else f"{stack}.hook_resid_final"
    if reading == "cross_query":
        return f"{stack}.{layer}.{'ln1' if post_norm else 'ln_cross'}.hook_normalized"
    return f"{stack}.{layer}.hook_resid_pre" if post_norm else f"{stack}.{layer}.ln1.hook_normalized"


def walk_steps(post_norm: bool, stack: str, layer: int, reading: Reading, cross: bool) -> list[Step]:
    """What lies between the stack's input and what reads the stream, from the reader down: norms to cross and
    blocks whose parts join (`layer` is the stack's layer count for its output)."""
    steps: list[Step] = []
    if reading == "cross_query":  # the layer's own self-attention lies under its cross-attention
        steps += [("norm", f"{stack}.{layer}.{'ln1' if post_norm else 'ln_cross'}"), ("attn", f"{stack}.{layer}")]
    elif not post_norm or reading == "output":  # a post-norm model's output norms are each layer's ln2, below
        steps.append(("norm", f"{stack}.ln_final" if reading == "output" else f"{stack}.{layer}.ln1"))
    for below in reversed(range(layer)):
        prefix = f"{stack}.{below}"
        if post_norm:
            steps += [("norm", f"{prefix}.ln2"), ("mlp", prefix)]
            steps += [("norm", f"{prefix}.ln_cross"), ("cross", prefix)] if cross else []
            steps += [("norm", f"{prefix}.ln1"), ("attn", prefix)]
        else:
            steps += [("mlp", prefix), *([("cross", prefix)] if cross else []), ("attn", prefix)]
    return steps


def stream_shares(runner: Runner, trace: Trace, steps: list[Step], stack: str, positions: np.ndarray,
                  coefficients: np.ndarray, basis: np.ndarray, prefix: str = "") -> StreamShares:
    """Each part's share along directions coefficients @ basis ((n, k) @ (k, d_model) float64: n directions), row r
    at position positions[r], of the stream read at the top of `steps`; `prefix` names the parts ("encoder.").
    UserError where a layer's heads do not add up to what its attention writes (a norm inside its output)."""
    walk = _Walk(runner, trace, positions, coefficients, basis)
    groups: list[tuple[list[str], list[np.ndarray]]] = []  # one a block, from the reader down
    for kind, where in steps:
        if kind == "norm":
            walk.back_through(where)
            continue
        layer = int(where.rsplit(".", 1)[1])
        if kind == "mlp":
            groups.append(([f"{prefix}L{layer}.mlp"], [walk.share(trace[f"{where}.hook_mlp_out"])]))
            continue
        cross = kind == "cross"
        heads, bias = walk.attention(where, cross)
        head_name = f"{prefix}L{layer}.cross.H{{}}" if cross else f"{prefix}L{layer}H{{}}"
        bias_name = f"{prefix}L{layer}.{'cross_attn_bias' if cross else 'attn_bias'}"
        groups.append(([*(head_name.format(h) for h in range(len(heads))), *([bias_name] if bias is not None else [])],
                       [*heads, *([bias] if bias is not None else [])]))
    embeddings = _embeddings(trace, stack, positions)
    groups.append(([prefix + name for name, _ in embeddings], [walk.share(v, at_positions=False)
                                                                for _, v in embeddings]))
    groups.reverse()  # the stream's order: the embeddings, then each layer's blocks
    return StreamShares([name for names, _ in groups for name in names],
                        np.stack([row for _, rows in groups for row in rows]), walk.bias)


def _embeddings(trace: Trace, stack: str, positions: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(name, (n, d_model)) the stack's input at `positions`: the token and position embeddings apart where they add
    up to it, else the input whole (an embedding norm or a scaled sum lies between: `embed`)."""
    start = trace[f"{stack}.0.hook_resid_pre"][positions].astype(np.float64)
    parts = [(name, trace[f"{stack}.hook_{name}"][positions].astype(np.float64)) for name in ("embed", "pos_embed")
             if f"{stack}.hook_{name}" in trace]
    total = sum(value for _, value in parts)
    if parts and total.shape == start.shape and heads_add_up(total, start):  # (ALBERT's embeddings are narrower)
        return parts
    return [("embed", start)]


class _Walk:
    """Directions (n, d_model), row r at position positions[r], carried down the stream, kept as
    rows[:, None] x coefficients @ basis: (n,) x (n, k) @ (k, d_model), k = d_head. Every norm on the way is a row's
    scale and a map of the basis alone, so a layer's heads cost n x k x d_head a head, not n x d_model x d_head."""

    def __init__(self, runner: Runner, trace: Trace, positions: np.ndarray, coefficients: np.ndarray,
                 basis: np.ndarray) -> None:
        self.runner, self.trace, self.positions = runner, trace, positions
        self.rows = np.ones(len(positions))  # (n,) float64
        self.coefficients, self.basis = coefficients, basis  # (n, k), (k, d_model) float64
        self.bias = np.zeros(len(positions))  # (n,)

    def share(self, value: np.ndarray, at_positions: bool = True) -> np.ndarray:
        """(n,): value (pos, d_model) at each row's position (or already (n, d_model)) · its direction."""
        rows = (value[self.positions] if at_positions else value).astype(np.float64)
        return self.rows * np.einsum("nk,nk->n", self.coefficients, rows @ self.basis.T)

    def along(self, vector: np.ndarray) -> np.ndarray:
        """(n,): one vector (d_model,) · each row's direction."""
        return self.rows * (self.coefficients @ (self.basis @ vector))

    def back_through(self, norm: str) -> None:
        """Across the norm `norm` ("decoder.3.ln1") where the model has one (its scale in the trace)."""
        if f"{norm}.hook_scale" not in self.trace:
            return
        module = norm_module(self.runner, f"{norm}.hook_normalized")
        gain, bias = norm_affine(module)  # (d_model,) each
        self.bias = self.bias + self.along(bias)
        self.rows = self.rows / self.trace[f"{norm}.hook_scale"][self.positions, 0].astype(np.float64)
        turned = self.basis * gain
        self.basis = turned - turned.mean(-1, keepdims=True) if norm_centres(module) else turned

    def attention(self, prefix: str, cross: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """((heads, n), (n,)): each head's share and the output bias's (None where it has none), of the self- or
        cross-attention at `prefix` ("decoder.2"); UserError where they do not add up to what it writes."""
        stack, layer = prefix.split(".")
        site = "cross_attn" if cross else "attn"
        z = self.trace[f"{prefix}.{site}.hook_z"][:, self.positions].astype(np.float64)  # (heads, n, d_head)
        w_o, b_o = output_projection(self.runner, f"{stack}.{site}", int(layer))  # (heads x d_head, d_model)
        heads, n, d_head = z.shape
        w_o = w_o.astype(np.float64)
        bias = None if b_o is None else b_o.astype(np.float64)
        self._check(prefix, cross, w_o, bias)
        read = (self.coefficients @ (self.basis @ w_o.T)).reshape(n, heads, d_head)  # (n, heads, d_head)
        shares = self.rows * np.einsum("hnk,nhk->hn", z, read)
        return shares, None if bias is None else self.along(bias)

    def _check(self, prefix: str, cross: bool, w_o: np.ndarray, bias: np.ndarray | None) -> None:
        """UserError where the heads' z · W_O and b_O do not add up to what the attention writes, at up to
        CHECKED of the rows' positions (a norm inside the attention's output differs at every one; the score's own
        check holds every row)."""
        site, out = ("cross_attn", "hook_cross_attn_out") if cross else ("attn", "hook_attn_out")
        distinct = np.unique(self.positions)
        at = distinct[np.linspace(0, len(distinct) - 1, min(CHECKED, len(distinct))).astype(int)]
        z = self.trace[f"{prefix}.{site}.hook_z"][:, at].astype(np.float64)  # (heads, m, d_head)
        rebuilt = z.transpose(1, 0, 2).reshape(len(at), -1) @ w_o + (0 if bias is None else bias)
        if not heads_add_up(rebuilt, self.trace[f"{prefix}.{out}"][at].astype(np.float64)):
            raise UserError(f"{self.runner.facts.model_id}: the heads of {prefix}.{site} do not add up to what the "
                            "layer writes to the residual stream (a norm after the attention, as in Gemma 2 and "
                            "OLMo 2), so what each earlier head adds to a score cannot be told apart.")
