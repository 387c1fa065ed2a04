"""The residual stream of a decoder read block by block (model/hf/discovery: a hybrid's, softmax attention in some
blocks only, the others a state space, linear attention or a convolution; Falcon-H1's, attention beside Mamba; a dense
Granite's, whose blocks add their parts scaled and so offer no sum of them): the residual views of plot/stream.py read
it here, block by block, from `decoder.blocks.{b}.hook_resid_pre` and `hook_resid_post`, rather than from the
attention layers' own residual hooks. Such a block has no split into attention and MLP that the model offers: what it
writes is its output minus its input."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.viz.residual import cosine_between_layers, norms, write_share

BLOCK_MEASURES = {  # the residual measures read block by block: name -> (label, value name)
    "boundaries": ("‖residual‖ before the first block and after each", "‖x‖"),
    "block": ("‖what each block writes‖ (its output − its input)", "‖Δx‖"),
    "block_share": ("each block's share of what it hands on", "share"),
    "cosine": ("cosine between consecutive blocks", "cosine"),
}


def blockwise(trace: Trace, stack: str) -> bool:
    """Whether the stack's stream is read block by block (`facts.block_kinds`: a hybrid's decoder, Falcon-H1's, a
    dense Granite's, whose blocks are each "softmax attention")."""
    return stack == "decoder" and bool(trace.facts.block_kinds)


def block_hooks(trace: Trace) -> list[str]:
    """The stream before the first block, then after each block (what the next block reads)."""
    blocks = len(trace.facts.block_kinds)
    return ["decoder.blocks.0.hook_resid_pre", *(f"decoder.blocks.{b}.hook_resid_post" for b in range(blocks))]


def kind_word(kind: str) -> str:
    """A block's kind, short: "gated delta-net" for "gated delta-net (linear attention)"."""
    return kind.split(" (")[0]


def block_measure(trace: Trace, measure: str) -> np.ndarray:
    """One measure of BLOCK_MEASURES, (rows, pos): blocks + 1 rows for "boundaries", one row a block else."""
    stream = np.stack([trace.captured[hook] for hook in block_hooks(trace)])  # (blocks + 1, pos, d_model)
    if measure == "boundaries":
        return np.stack([norms(x) for x in stream])
    if measure == "cosine":
        return cosine_between_layers(stream)
    writes = np.stack([norms(after.astype(np.float64) - before) for before, after in pairwise(stream)])
    return writes if measure == "block" else write_share(writes, np.stack([norms(x) for x in stream[1:]]))


def block_rows(trace: Trace, measure: str) -> list[str]:
    """A measure's row names: "L0 pre", "L0 post", "L1 post", … for the boundaries; "L0 gated delta-net",
    "L1 softmax attention", … else."""
    kinds = trace.facts.block_kinds
    if measure == "boundaries":
        return ["L0 pre", *(f"L{b} post" for b in range(len(kinds)))]
    return [f"L{b} {kind_word(kind)}" for b, kind in enumerate(kinds)]
