"""Directions carried down the residual stream, each at its own position, from what an attention reads to the
embeddings (as direct logit attribution carries one, model/inspect/attribution.py): across a norm (out = centre(x) /
scale x gain + bias, its scale frozen at the run's value) a direction becomes gain x direction / scale, centred for a
LayerNorm, and the bias's share joins `bias`; a part's share is its value at the row's position · the row's direction.

A head writes z · its rows of W_O: z times its output gate first where the model gates each head by what its
attention reads (Qwen3-Next, Qwen3.5), through the norm after attention where the block has one (a sandwich norm:
Gemma 2 and 3, OLMo 2), its scale frozen at what it is for the whole attention output there (recomputed from the
heads' z, checked against what the layer writes), times the block's factor where it adds attention scaled (Granite 4,
Falcon-H1: model/inspect/block_scales.py). A block that is no attention layer of the app's (a hybrid's Mamba,
delta-net or convolution block, an MLP alone) writes one part: its output less its input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.discovery.norms import is_norm
from attention_atlas.model.hf.taps import norm_eps
from attention_atlas.model.inspect.block_scales import attention_write_scale
from attention_atlas.model.inspect.head_math import concat_heads, output_gates
from attention_atlas.model.inspect.head_weights import HeadWeights, head_weights
from attention_atlas.model.inspect.norm_output import block_input, norm_affine, norm_centres, norm_module
from attention_atlas.model.inspect.offered import offered_hooks
from attention_atlas.model.inspect.stream_steps import attention_input, attention_layer, block_name

CHECKED = 32  # positions at which a layer's heads are checked to add up to what its attention writes
AddsUp = Callable[[np.ndarray, np.ndarray], bool]  # (rebuilt, written) -> whether the parts rebuilt what was written


class Walk:
    """Directions (n, d_model), row r at position positions[r], carried down the stream, kept as
    rows[:, None] x coefficients @ basis: (n,) x (n, k) @ (k, d_model), k = d_head. Every norm on the way is a row's
    scale and a map of the basis alone, so a layer's heads cost n x k x d_head a head, not n x d_model x d_head.
    `adds_up` is the check, with its tolerance, that the parts rebuild what a layer or block wrote
    (model/inspect/attribution.py `heads_add_up`: one for every split)."""

    def __init__(self, runner: Runner, trace: Trace, positions: np.ndarray, coefficients: np.ndarray,
                 basis: np.ndarray, adds_up: AddsUp) -> None:
        self.runner, self.trace, self.positions, self.adds_up = runner, trace, positions, adds_up
        self.rows = np.ones(len(positions))  # (n,) float64
        self.coefficients, self.basis = coefficients, basis  # (n, k), (k, d_model) float64
        self.bias = np.zeros(len(positions))  # (n,)

    def share(self, value: np.ndarray, at_positions: bool = True) -> np.ndarray:
        """(n,): value (pos, d_model) at each row's position (or already (n, d_model)) · its direction."""
        rows = (value[self.positions] if at_positions else value).astype(np.float64)
        return self.rows * np.einsum("nk,nk->n", self.coefficients, rows @ self.basis.T)

    def along(self, vector: np.ndarray, rows: np.ndarray | None = None, basis: np.ndarray | None = None) -> np.ndarray:
        """(n,): one vector (d_model,) · each row's direction (or the direction `rows` x coefficients @ `basis`)."""
        rows, basis = (self.rows if rows is None else rows), (self.basis if basis is None else basis)
        return rows * (self.coefficients @ (basis @ vector))

    def back_through(self, norm: str) -> None:
        """Across the norm `norm` ("decoder.3.ln1") where the model has one (its scale in the trace; an identity in a
        norm's place, ModernBERT's first, divides by 1)."""
        if f"{norm}.hook_scale" not in self.trace:
            return
        module = norm_module(self.runner, f"{norm}.hook_normalized")
        if isinstance(module, nn.Identity):
            return
        gain, bias = norm_affine(module)  # (d_model,) each
        self.bias = self.bias + self.along(bias)
        self.rows = self.rows / self.trace[f"{norm}.hook_scale"][self.positions, 0].astype(np.float64)
        self.basis = _turned(self.basis, gain, norm_centres(module))

    def attention(self, prefix: str, cross: bool, factor: float = 1.0,
                  checked: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """((heads, n), (n,)): each head's share and the output bias's (None where it has none), of the self- or
        cross-attention at `prefix` ("decoder.2"), what it writes times `factor`; UserError where they do not add up
        to what it writes (`checked`: where the layer records that)."""
        stack, layer = prefix.split(".")
        site, out = ("cross_attn", "hook_cross_attn_out") if cross else ("attn", "hook_attn_out")
        weights = head_weights(self.runner, f"{stack}.{site}", int(layer), 0, 1, 1)
        w_o = weights.w_o.astype(np.float64) * factor  # (heads x d_value, d_model)
        b_o = None if weights.b_o is None else weights.b_o.astype(np.float64) * factor
        norm = _output_norm(self.runner, f"{prefix}.{out}")
        if checked:
            self._check(prefix, site, out, weights, w_o, b_o, norm)
        z = self._z(prefix, site, weights, self.positions)  # (heads, n, d_value)
        heads, n, d_value = z.shape
        rows, basis = self.rows, self.basis
        if norm is not None:  # the heads' sum through the norm after attention, its scale frozen here
            gain, bias = norm_affine(norm)
            self.bias = self.bias + self.along(bias)
            rows = rows / _scale(_project(z, w_o, b_o), norm)
            basis = _turned(basis, gain, norm_centres(norm))
        read = (self.coefficients @ (basis @ w_o.T)).reshape(n, heads, d_value)  # (n, heads, d_value)
        shares = rows * np.einsum("hnk,nhk->hn", z, read)
        return shares, None if b_o is None else self.along(b_o, rows, basis)

    def block(self, block: int) -> tuple[list[str], list[np.ndarray]]:
        """(names, shares (n,) each): what block `block` of a block-by-block decoder writes, as parts: the whole
        block where it holds no softmax attention; else its heads, output bias and MLP where the block records their
        sums (checked to add up to its write), or its heads and `L{l}.rest` (what else it writes: its MLP, Mamba
        beside attention) where it records none."""
        facts, here = self.runner.facts, f"decoder.blocks.{block}"
        written = self.trace[f"{here}.hook_resid_post"].astype(np.float64) - self.trace[f"{here}.hook_resid_pre"]
        layer = attention_layer(facts, block)
        if layer is None:
            return [block_name(facts, block)], [self.share(written)]
        prefix, offered = f"decoder.{layer}", offered_hooks(self.runner)
        recorded = [f"{prefix}.{name}" for name in ("hook_attn_out", "hook_mlp_out") if f"{prefix}.{name}" in offered]
        factor = 1.0 if recorded else attention_write_scale(self.runner)
        if factor is None:
            raise UserError(f"{facts.model_id}: block {block} records no sum of what its attention writes, and the "
                            "factor it adds it with is not known here, so its heads cannot be told apart.")
        heads, bias = self.attention(prefix, False, factor, checked=bool(recorded))
        names = [f"L{layer}H{h}" for h in range(len(heads))] + ([f"L{layer}.attn_bias"] if bias is not None else [])
        rows = [*heads, *([bias] if bias is not None else [])]
        if not recorded:
            return [*names, f"L{layer}.rest"], [*rows, self.share(written) - sum(rows)]
        self._check_sum(block, written, recorded)
        mlp = [f"{prefix}.hook_mlp_out"] if f"{prefix}.hook_mlp_out" in recorded else []
        return names + [f"L{layer}.mlp"] * len(mlp), rows + [self.share(self.trace[hook]) for hook in mlp]

    def _z(self, prefix: str, site: str, weights: HeadWeights, positions: np.ndarray) -> np.ndarray:
        """(heads, n, d_value) float64: each head's z at `positions`, times its output gate where the model has one."""
        z = self.trace[f"{prefix}.{site}.hook_z"][:, positions].astype(np.float64)
        if weights.gate is None:
            return z
        hook = attention_input(self.runner, prefix)
        x = block_input(self.runner, hook, self.trace[hook][positions]).astype(np.float64)  # (n, d_model)
        gates = output_gates(weights, x)  # (n, heads x d_value)
        return z * gates.reshape(len(positions), *z.shape[::2]).transpose(1, 0, 2)

    def _check(self, prefix: str, site: str, out: str, weights: HeadWeights, w_o: np.ndarray, b_o: np.ndarray | None,
               norm: nn.Module | None) -> None:
        """UserError where the heads' z · W_O and b_O (through the norm after attention) do not add up to what the
        attention writes, at up to CHECKED of the rows' positions (the score's own check holds every row)."""
        at = self._checked_positions()
        rebuilt = _project(self._z(prefix, site, weights, at), w_o, b_o)  # (m, d_model)
        if norm is not None:
            gain, bias = norm_affine(norm)
            centred = rebuilt - rebuilt.mean(-1, keepdims=True) if norm_centres(norm) else rebuilt
            rebuilt = centred / _scale(rebuilt, norm)[:, None] * gain + bias
        if not self.adds_up(rebuilt, self.trace[f"{prefix}.{out}"][at].astype(np.float64)):
            raise UserError(f"{self.runner.facts.model_id}: the heads of {prefix}.{site} do not add up to what the "
                            "layer writes to the residual stream, so what each earlier head adds to a score cannot be "
                            "told apart.")

    def _check_sum(self, block: int, written: np.ndarray, recorded: list[str]) -> None:
        """UserError where what block `block` records of its attention (and MLP) is not what it writes."""
        at = self._checked_positions()
        if not self.adds_up(sum(self.trace[hook][at].astype(np.float64) for hook in recorded), written[at]):
            raise UserError(f"{self.runner.facts.model_id}: block {block} writes more to the residual stream than its "
                            "attention and MLP, which this split cannot tell apart.")

    def _checked_positions(self) -> np.ndarray:
        distinct = np.unique(self.positions)
        return distinct[np.linspace(0, len(distinct) - 1, min(CHECKED, len(distinct))).astype(int)]


def _turned(basis: np.ndarray, gain: np.ndarray, centres: bool) -> np.ndarray:
    """A basis (k, d_model) of directions read after a norm as those of its input: x gain, centred for a LayerNorm."""
    turned = basis * gain
    return turned - turned.mean(-1, keepdims=True) if centres else turned


def _project(z: np.ndarray, w_o: np.ndarray, b_o: np.ndarray | None) -> np.ndarray:
    """(n, d_model): every head's z (heads, n, d_value) through W_O, and b_O."""
    return concat_heads(z) @ w_o + (0 if b_o is None else b_o)


def _scale(x: np.ndarray, norm: nn.Module) -> np.ndarray:
    """(n,): what `norm` divides x (n, d) by: its root mean square, centred for a LayerNorm, with its epsilon."""
    centred = x - x.mean(-1, keepdims=True) if norm_centres(norm) else x
    return np.sqrt((centred**2).mean(-1) + norm_eps(norm))


def _output_norm(runner: Runner, hook: str) -> nn.Module | None:
    """The norm whose output is what the attention writes (`hook`: its hook_attn_out), where the block has one."""
    tap = getattr(runner, "taps", {}).get(hook)
    module = getattr(tap, "module", None)
    return module if module is not None and is_norm(module) else None
