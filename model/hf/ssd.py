"""The attention hidden in a Mamba-2 layer (state space duality: Dao & Gu 2024). Its scan over the text is exactly a
causal mixing of positions: for each head h,

    y_t = sum over s <= t of M[h, t, s] x_s + D_h x_t,    M[h, t, s] = (C_t . B_s) exp(sum_{k=s+1..t} dt_k A_h) dt_s

with x, B and C made from the layer's input by its projection and short causal convolution, dt its step (softplus of
a projection plus a bias, clipped to the layer's limit) and A_h = -exp(A_log_h). M is no softmax: a row need not sum
to 1, and its weights can be negative (C . B is any number). `implicit_attention` makes M from what the layer read in
one run, then makes the scan's output y again from M and refuses with a sentence where it differs from the y the
model's scan computed (what the layer's gated norm read) by more than HELD_TO of the part M makes (y - D x): the matrix
drawn is the one the layer used.

Mamba-2 mixers are found by their parts (in_proj, conv1d, A_log, dt_bias, D, norm, out_proj: Granite 4 hybrid's and
Nemotron-H's). Falcon-H1's scales its parts by multipliers this does not follow: it is refused, as are Mamba (v1,
Jamba's: a decay per channel and state, no head's single matrix) and gated delta-nets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attention_atlas.model.core.capture.hooks import ModuleTap
from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.discovery.stack import block_list
from attention_atlas.model.hf.placement import input_device
from attention_atlas.model.hf.taps import first_input

PARTS = ("in_proj", "conv1d", "A_log", "dt_bias", "D", "norm", "out_proj")  # what makes a module a Mamba-2 mixer
HELD_TO = 1e-3  # the largest difference allowed between y made from M and the model's, relative to M's part of it
MOST_TOKENS = 2048  # M is (heads, n, n) float32: 2,048 tokens and 128 heads are 2 GB


@dataclass(frozen=True)
class ImplicitAttention:
    """One Mamba-2 layer's implicit attention on a text. Shapes: (heads, n, n), (heads,)."""

    block: int  # the block (layer) number
    matrix: np.ndarray  # (heads, n, n) float32: M[h, t, s], 0 above the diagonal (s > t)
    skip: np.ndarray  # (heads,) D: each head's x_t's own weight beside M
    difference: float  # the largest |y made from M - the model's y| / the largest |M's part of y|

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.skip.nbytes


def ssd_mixers(model: nn.Module) -> dict[int, nn.Module]:
    """Block number -> its Mamba-2 mixer, for the blocks that have one."""
    found = {}
    for number, block in enumerate(block_list(model)[1]):
        mixer = next((m for m in block.modules() if all(hasattr(m, part) for part in PARTS)), None)
        if mixer is not None and not hasattr(mixer, "ssm_in_multiplier"):  # Falcon-H1's multipliers: not followed
            found[number] = mixer
    return found


def implicit_attention(model: nn.Module, ids: list[int], block: int) -> ImplicitAttention:
    """Block `block`'s mixer's M on the tokens `ids` (one run of the model), held to the model's own output."""
    mixers = ssd_mixers(model)
    if block not in mixers:
        raise UserError(f"layer {block} is no Mamba-2 layer of this model (those are: "
                        f"{', '.join(map(str, mixers)) or 'none'}): only a Mamba-2 layer's scan is an attention matrix")
    if len(ids) > MOST_TOKENS:
        raise UserError(f"the implicit attention is drawn for texts of up to {MOST_TOKENS:,} tokens, not {len(ids):,}")
    mixer = mixers[block]
    taps = {"in": ModuleTap(mixer, first_input), "y": ModuleTap(mixer.norm, first_input)}  # y: the scan's output
    input_ids = torch.tensor([ids], device=input_device(model))
    _, seen = capture(model, taps, ("in", "y"), lambda: model(input_ids=input_ids, use_cache=False, logits_to_keep=1))
    x_in = torch.from_numpy(np.asarray(seen["in"])[0]).double()  # (n, d_model)
    matrix, xs, _ = _matrix(mixer, x_in)  # (heads, n, n), (n, heads, d_head)
    skip = mixer.D.detach().double().cpu()  # (heads,)
    mixed = torch.einsum("hts,shp->thp", matrix, xs).reshape(len(xs), -1).numpy()  # (n, inner): M's part of y
    y = mixed + (skip[None, :, None] * xs).reshape(len(xs), -1).numpy()
    model_y = np.asarray(seen["y"], dtype=np.float64)[0]  # (n, inner)
    difference = float(np.abs(y - model_y).max() / max(float(np.abs(mixed).max()), 1e-30))
    if not difference <= HELD_TO:
        raise UserError(f"layer {block}'s scan made from its implicit attention differs from the model's by "
                        f"{difference:.2g} of the part the matrix makes, more than {HELD_TO:g}: the matrix is not "
                        "drawn")
    return ImplicitAttention(block, matrix.float().numpy(), skip.float().numpy(), difference)


def _matrix(mixer: nn.Module, x_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From the mixer's input (n, d_model), float64: M (heads, n, n), x (n, heads, d_head) and the gate (n, inner),
    as its chunked scan computes them (the projection, the causal depthwise convolution and its activation, dt)."""
    n, heads, d_head = len(x_in), mixer.num_heads, mixer.head_dim
    inner, states, groups = mixer.intermediate_size, mixer.ssm_state_size, mixer.n_groups
    weight = {name: p.detach().double().cpu() for name, p in mixer.named_parameters() if not name.startswith("norm")}
    projected = F.linear(x_in, weight["in_proj.weight"], weight.get("in_proj.bias"))  # (n, inner + conv + heads)
    gate, xbc, dt = projected.split([inner, mixer.conv_dim, heads], dim=-1)
    conv = F.conv1d(xbc.T[None], weight["conv1d.weight"], weight.get("conv1d.bias"),
                    padding=weight["conv1d.weight"].shape[-1] - 1, groups=mixer.conv_dim)[0, :, :n].T  # (n, conv)
    xs, b, c = mixer.act(conv).split([inner, groups * states, groups * states], dim=-1)
    low, high = mixer.time_step_limit  # pyright: ignore[reportGeneralTypeIssues] a tuple; torch's __getattr__
    dt = F.softplus(dt + weight["dt_bias"]).clamp(low, high)  # (n, heads)
    a = -torch.exp(weight["A_log"])  # (heads,)
    per_group = heads // groups
    b = b.view(n, groups, states).repeat_interleave(per_group, dim=1)  # (n, heads, states)
    c = c.view(n, groups, states).repeat_interleave(per_group, dim=1)
    decay = torch.cumsum(dt * a, dim=0).T  # (heads, n): sum_{k <= t} dt_k A_h
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    kept = torch.exp((decay[:, :, None] - decay[:, None, :]).masked_fill(~causal, -torch.inf))  # (heads, t, s)
    matrix = torch.einsum("thn,shn->hts", c, b) * kept * dt.T[:, None, :]  # (heads, t, s)
    return matrix, xs.view(n, heads, d_head), gate
