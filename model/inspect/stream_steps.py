"""What lies between an attention's input and the embeddings of its stack, from the reader down: the norms a walk back
down the residual stream crosses and the blocks whose parts join it (model/inspect/qk_parts.py walks them), and the
hooks each step reads.

A stack of the app's layers is walked layer by layer: a norm, then each layer's MLP, cross-attention and attention
(a post-norm model crosses each layer's norms too). A decoder whose every block offers its stream
(`facts.block_kinds`: a hybrid's state-space, linear-attention and convolution blocks among its attention blocks,
Falcon-H1's) is walked block by block: each block's write is its `decoder.blocks.{b}.hook_resid_post` less its
`hook_resid_pre`, a block without softmax attention one part, an attention block its heads and the rest
(model/inspect/stream_walk.py `Walk.block`).
"""

from __future__ import annotations

from typing import Literal

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.offered import offered_hooks

Reading = Literal["attn", "cross_query", "output"]  # what reads the stream: self-attention at a layer, the
# cross-attention's queries at a layer, or what the stack hands on (its output: the cross-attention's keys)
Step = tuple[Literal["norm", "attn", "cross", "mlp", "block"], str]  # (kind, hook prefix: "decoder.3.ln1",
# "decoder.3", "decoder.blocks.2")


def blockwise(facts: ModelFacts, stack: str) -> bool:
    """Whether `stack` is walked block by block (a decoder whose every block offers its stream)."""
    return stack == "decoder" and bool(facts.block_kinds)


def stack_input(facts: ModelFacts, stack: str) -> str:
    """The hook of the stream going into the stack's first block (a hybrid's first block may be no attention layer)."""
    return "decoder.blocks.0.hook_resid_pre" if blockwise(facts, stack) else f"{stack}.0.hook_resid_pre"


def attention_layer(facts: ModelFacts, block: int) -> int | None:
    """The app's attention layer that block `block` of a block-by-block decoder holds, None where it holds none."""
    if facts.attention_blocks:
        return facts.attention_blocks.index(block) if block in facts.attention_blocks else None
    return block if block < facts.n_decoder_layers and facts.block_kinds[block].startswith("softmax") else None


def block_name(facts: ModelFacts, block: int) -> str:
    """A block without softmax attention as a part: "block 0 (Mamba)", "block 2 (MLP)"."""
    kind = facts.block_kinds[block]
    return f"block {block} ({'MLP' if kind.startswith('no token mixing') else kind.split(' (')[0]})"


def gated(runner: Runner, stack: str) -> bool:
    """Whether the self-attention of `stack` gates each head's output by what it reads (Qwen3-Next, Qwen3.5)."""
    return head_weights(runner, f"{stack}.attn", 0, 0, 1, 1).gate is not None


def stream_hooks(runner: Runner, stack: str, cross: bool, gated: bool) -> list[str]:
    """Glob patterns of every hook a walk down `stack` reads (cross: its layers have cross-attention; gated: each head's
    output is gated by what its attention reads, which is then read too)."""
    hooks = [f"{stack}.hook_embed", f"{stack}.hook_pos_embed", stack_input(runner.facts, stack),
             f"{stack}.*.hook_scale", f"{stack}.*.attn.hook_z", f"{stack}.*.hook_attn_out", f"{stack}.*.hook_mlp_out"]
    hooks += [f"{stack}.*.cross_attn.hook_z", f"{stack}.*.hook_cross_attn_out"] if cross else []
    hooks += [f"{stack}.*.ln1.hook_normalized", f"{stack}.*.hook_resid_pre"] if gated else []
    return hooks + (["decoder.blocks.*.hook_resid_pre", "decoder.blocks.*.hook_resid_post"]
                    if blockwise(runner.facts, stack) else [])


def input_hook(runner: Runner, stack: str, layer: int, reading: Reading, n_layers: int) -> str:
    """The hook holding what reads the stream there: a norm's `hook_normalized` (its output: ×gain + bias), or the
    stream itself (a post-norm model's self-attention reads the layer's input, already normalised; OLMo 2's, with no
    norm before attention, reads it whole)."""
    post_norm = runner.facts.norm.startswith("post")
    if reading == "output":
        return f"{stack}.{n_layers - 1}.hook_normalized_resid_post" if post_norm else f"{stack}.hook_resid_final"
    if reading == "cross_query":
        return f"{stack}.{layer}.{'ln1' if post_norm else 'ln_cross'}.hook_normalized"
    return attention_input(runner, f"{stack}.{layer}")


def attention_input(runner: Runner, prefix: str) -> str:
    """The hook of what self-attention at `prefix` ("decoder.3") reads: its norm's output, or the layer's input."""
    normed = f"{prefix}.ln1.hook_normalized"
    post_norm = runner.facts.norm.startswith("post")
    return normed if not post_norm and normed in offered_hooks(runner) else f"{prefix}.hook_resid_pre"


def walk_steps(facts: ModelFacts, stack: str, layer: int, reading: Reading, cross: bool) -> list[Step]:
    """What lies between the stack's input and what reads the stream, from the reader down: norms to cross and
    blocks whose parts join (`layer` is the stack's layer count for its output)."""
    post_norm = facts.norm.startswith("post")
    steps: list[Step] = []
    if reading == "cross_query":  # the layer's own self-attention lies under its cross-attention
        steps.extend([("norm", f"{stack}.{layer}.{'ln1' if post_norm else 'ln_cross'}"), ("attn", f"{stack}.{layer}")])
    elif not post_norm or reading == "output":  # a post-norm model's output norms are each layer's ln2, below
        steps.append(("norm", f"{stack}.ln_final" if reading == "output" else f"{stack}.{layer}.ln1"))
    if blockwise(facts, stack):
        first = len(facts.block_kinds) if reading == "output" else (
            facts.attention_blocks[layer] if facts.attention_blocks else layer)
        return steps + [("block", f"decoder.blocks.{b}") for b in reversed(range(first))]
    for below in reversed(range(layer)):
        prefix = f"{stack}.{below}"
        if post_norm:
            steps.extend([("norm", f"{prefix}.ln2"), ("mlp", prefix)])
            steps.extend([("norm", f"{prefix}.ln_cross"), ("cross", prefix)] if cross else [])
            steps.extend([("norm", f"{prefix}.ln1"), ("attn", prefix)])
        else:
            steps.extend([("mlp", prefix), *([("cross", prefix)] if cross else []), ("attn", prefix)])
    return steps


def step_hooks(runner: Runner, step: Step, gated: bool) -> list[str]:
    """The hooks one step reads (a norm's scale is read where the model has that norm: none here)."""
    kind, where = step
    if kind == "block":
        block = int(where.rsplit(".", 1)[1])
        hooks = [f"{where}.hook_resid_pre", f"{where}.hook_resid_post"]
        layer = attention_layer(runner.facts, block)
        if layer is None:
            return hooks
        prefix, offered = f"decoder.{layer}", offered_hooks(runner)
        sums = [f"{prefix}.{name}" for name in ("hook_attn_out", "hook_mlp_out") if f"{prefix}.{name}" in offered]
        return [*hooks, f"{prefix}.attn.hook_z", *([attention_input(runner, prefix)] if gated else []), *sums]
    reads = {"attn": [f"{where}.attn.hook_z", f"{where}.hook_attn_out"],
             "cross": [f"{where}.cross_attn.hook_z", f"{where}.hook_cross_attn_out"],
             "mlp": [f"{where}.hook_mlp_out"], "norm": []}[kind]
    return reads + ([attention_input(runner, where)] if gated and kind == "attn" else [])
