"""What each part of the residual stream adds along given directions of an attention layer's input: the stream that a
layer reads is the sum of the embeddings, every earlier head's z · W_O, each attention's output bias and each MLP's
output (its biases inside), and every other block's write in a hybrid; a norm whose scale is frozen at the run's value
is linear in it.

One direction a row, each at its own position, is carried from the attention's input back down the stack
(model/inspect/stream_walk.py) across the steps that lie on the way (model/inspect/stream_steps.py); a part's share is
its value at the row's position · the row's direction. Post-norm models cross every norm on the way.

Parts are named `embed` and `pos_embed` (where the token and position embeddings add up to the stack's input, else
`embed` is that input whole: an embedding norm), `L{l}H{h}` (a head's z · its rows of W_O), `L{l}.attn_bias` (b_O),
`L{l}.cross.H{h}` and `L{l}.cross_attn_bias` (an encoder-decoder's cross-attention), `L{l}.mlp`; in a hybrid, whose
layers l are its attention blocks, `block {b} ({kind})` a block of another kind ("block 0 (Mamba)", b its own number)
and `L{l}.rest` what an attention block writes besides its heads where it records no sum of them (its MLP, Granite 4's;
Mamba beside attention and the MLP, Falcon-H1's). A stack's parts read by another stack's attention (cross-attention's
keys) are prefixed by it: `encoder.L0H1`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.stream_steps import Step, stack_input
from attention_atlas.model.inspect.stream_walk import AddsUp, Walk


@dataclass(frozen=True)
class StreamShares:
    """Each part's share along each direction: `shares` (parts, n) in the order of `names`; `bias` (n,) the norms'
    biases on the way."""

    names: list[str]
    shares: np.ndarray
    bias: np.ndarray


def stream_shares(runner: Runner, trace: Trace, steps: list[Step], stack: str, positions: np.ndarray,
                  coefficients: np.ndarray, basis: np.ndarray, adds_up: AddsUp, prefix: str = "") -> StreamShares:
    """Each part's share along directions coefficients @ basis ((n, k) @ (k, d_model) float64: n directions), row r
    at position positions[r], of the stream read at the top of `steps`; `prefix` names the parts ("encoder.").
    UserError where a layer's heads do not add up to what its attention writes (`adds_up`)."""
    walk = Walk(runner, trace, positions, coefficients, basis, adds_up)
    groups: list[tuple[list[str], list[np.ndarray]]] = []  # one a block, from the reader down
    for kind, where in steps:
        if kind == "norm":
            walk.back_through(where)
            continue
        number = int(where.rsplit(".", 1)[1])
        if kind == "block":
            names, rows = walk.block(number)
            groups.append(([prefix + name for name in names], rows))
        elif kind == "mlp":
            groups.append(([f"{prefix}L{number}.mlp"], [walk.share(trace[f"{where}.hook_mlp_out"])]))
        else:
            cross = kind == "cross"
            heads, bias = walk.attention(where, cross)
            head_name = f"{prefix}L{number}.cross.H{{}}" if cross else f"{prefix}L{number}H{{}}"
            bias_name = f"{prefix}L{number}.{'cross_attn_bias' if cross else 'attn_bias'}"
            with_bias = [bias] if bias is not None else []
            groups.append(([*(head_name.format(h) for h in range(len(heads))), *[bias_name] * len(with_bias)],
                           [*heads, *with_bias]))
    embeddings = _embeddings(runner, trace, stack, positions, adds_up)
    groups.append(([prefix + name for name, _ in embeddings], [walk.share(v, at_positions=False)
                                                                for _, v in embeddings]))
    groups.reverse()  # the stream's order: the embeddings, then each layer's blocks
    return StreamShares([name for names, _ in groups for name in names],
                        np.stack([row for _, rows in groups for row in rows]), walk.bias)


def _embeddings(runner: Runner, trace: Trace, stack: str, positions: np.ndarray,
                adds_up: AddsUp) -> list[tuple[str, np.ndarray]]:
    """(name, (n, d_model)) the stack's input at `positions`: the token and position embeddings apart where they add
    up to it, else the input whole (an embedding norm or a scaled sum lies between: `embed`)."""
    start = trace[stack_input(runner.facts, stack)][positions].astype(np.float64)
    parts = [(name, trace[f"{stack}.hook_{name}"][positions].astype(np.float64)) for name in ("embed", "pos_embed")
             if f"{stack}.hook_{name}" in trace]
    total = sum(value for _, value in parts)
    if parts and total.shape == start.shape and adds_up(total, start):  # (ALBERT's embeddings are narrower)
        return parts
    return [("embed", start)]
