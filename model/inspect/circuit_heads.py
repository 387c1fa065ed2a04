"""One layer's attention heads computed again in torch, each head's query, key and value reading an input of its own:
what a circuit's edges need, since an edge may carry the clean run into a head's query and the corrupted one into
its key (the EAP-IG library's `use_split_qkv_input`). Each input goes through the layer's own norm module, then the
head's weights as model/inspect/head_weights.py reads them (projections, query/key norms, rotary, scale, soft-capping,
sinks), the layer's mask, the softmax and the values; a grouped-query model's key/value head is each query head's own
copy (the library's `ungroup_grouped_query_attention`). The heads' z must equal the model's own (`matches`): where
they do not, the circuit is refused rather than computed from heads the model does not have."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import causal_mask
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.head_weights import HeadWeights, head_weights
from attention_atlas.model.inspect.norm_output import norm_module
from attention_atlas.model.inspect.rotary import rotate

Z_TOLERANCE = 1e-3  # relative to the largest |z| (at least 1): heads computed again must be the model's own; 16-bit
# models: 8 epsilons of their dtype


def _stack(arrays: list[np.ndarray | None], width: int) -> torch.Tensor:
    """(heads, ...) float32 from per-head arrays (None: zeros of (width,)), stacked in numpy (the arrays are column
    slices of a layer's weights: torch stacks such views slowly)."""
    return torch.from_numpy(np.stack([np.zeros(width, np.float32) if a is None else np.asarray(a, np.float32)
                                      for a in arrays]))


@dataclass
class LayerHeads:
    """Every head of one layer, ready to compute from inputs of their own (`z`) and to write to the stream
    (`results`). Tensors float32 on the model's computing device."""

    layer: int
    norm: nn.Module  # the layer's norm before attention (the model's own module)
    w: dict[str, torch.Tensor]  # "q", "k", "v": (heads, d_model, d_head); "o": (heads, d_head, d_model)
    b: dict[str, torch.Tensor]  # "q", "k", "v": (heads, d_head); "o": (d_model,)
    scale: float
    mask: torch.Tensor  # (len, len) bool: True where a query may see a key
    rotary: tuple[torch.Tensor, torch.Tensor, bool] | None  # cos, sin (len, r), interleaved
    norms: dict[str, tuple[torch.Tensor, float, tuple[torch.Tensor, torch.Tensor] | None]]  # "q"/"k": gain (heads,
    # d_head), eps, the whole projection (d_model, heads x d_head) and its bias when the RMS spans every head
    softcap: float | None
    bias: torch.Tensor | None  # (heads, len, len) added to the scores
    l2_eps: float | None
    query_scale: torch.Tensor | None  # (len,)
    sinks: torch.Tensor | None  # (heads,)

    def to(self, device: torch.device) -> LayerHeads:
        def move(value: object) -> object:
            if isinstance(value, torch.Tensor):
                return value.to(device)
            if isinstance(value, (tuple, list)):
                return type(value)(move(v) for v in value)
            if isinstance(value, dict):
                return {k: move(v) for k, v in value.items()}
            return value

        return LayerHeads(**{name: move(value) for name, value in vars(self).items()})  # type: ignore[arg-type]

    def z(self, x_q: torch.Tensor, x_k: torch.Tensor, x_v: torch.Tensor) -> torch.Tensor:
        """Each head's output (batch, heads, len, d_head) float32 from what its query, key and value read, each
        (batch, heads or 1, len, d_model) of the residual stream, before the layer's norm (1: every head reads the
        same; an input given for more than one of q, k, v is normalised once)."""
        normed: dict[int, torch.Tensor] = {}
        for x in (x_q, x_k, x_v):
            normed.setdefault(id(x), self._normed(x))
        y = dict(zip("qkv", (normed[id(x)] for x in (x_q, x_k, x_v)), strict=True))
        q, k, v = (y[letter] @ self.w[letter] + self.b[letter][:, None] for letter in "qkv")  # (batch, heads, len,
        # d_head): the heads' dimension broadcast
        q, k = self._query_key_norm("q", q, y["q"]), self._query_key_norm("k", k, y["k"])
        if self.rotary is not None:
            cos, sin, interleaved = self.rotary
            q, k = rotate(q, cos, sin, interleaved), rotate(k, cos, sin, interleaved)
        if self.l2_eps is not None:
            q, k = (a / torch.sqrt((a**2).mean(-1, keepdim=True) + self.l2_eps) for a in (q, k))
        if self.query_scale is not None:
            q = q * self.query_scale[:, None]
        scores = q @ k.transpose(-1, -2) * self.scale  # (batch, heads, len, len)
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        if self.bias is not None:
            scores = scores + self.bias
        scores = scores.masked_fill(~self.mask, float("-inf"))
        if self.sinks is None:
            return scores.softmax(-1) @ v
        sink = self.sinks[None, :, None, None].expand(*scores.shape[:-1], 1)
        return torch.cat([scores, sink], -1).softmax(-1)[..., :-1] @ v

    def results(self, z: torch.Tensor) -> torch.Tensor:
        """What each head writes to the stream, (batch, heads, len, d_model), from z (batch, heads, len, d_head): its
        rows of W_O (the output bias is no head's)."""
        return torch.einsum("bhpe,hed->bhpd", z, self.w["o"])

    def matches(self, computed: torch.Tensor, model_z: torch.Tensor, precision: str) -> None:
        """UserError where the heads computed here (batch, heads, len, d_head) are not the model's own z."""
        epsilon = float(torch.finfo(getattr(torch, precision)).eps)
        size = max(float(model_z.abs().max()), 1.0)
        error = float((computed - model_z.float()).abs().max())
        if not error <= max(Z_TOLERANCE, 8 * epsilon) * size:  # NaN too
            raise UserError(f"The heads of layer {self.layer}, computed again from their weights, differ from the "
                            f"model's own by {error:.3g} (of {size:.3g}): something in this model's attention is not "
                            "a part the circuit's graph knows, so no circuit is found rather than a wrong one.")

    def _normed(self, x: torch.Tensor) -> torch.Tensor:
        parameter = next(iter(self.norm.parameters()), None)
        dtype = torch.float32 if parameter is None else parameter.dtype
        return self.norm(x.to(dtype)).float()

    def _query_key_norm(self, letter: str, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if letter not in self.norms:
            return a
        gain, eps, whole = self.norms[letter]
        spanned = a if whole is None else y @ whole[0] + whole[1]  # (batch, heads, len, d_head or heads x d_head)
        return a / torch.sqrt((spanned**2).mean(-1, keepdim=True) + eps) * gain[:, None]


def layer_heads(runner: Runner, layer: int, length: int, device: torch.device) -> LayerHeads:
    """The heads of the decoder's `layer` for a text of `length` tokens; UserError for heads of a kind computed
    otherwise (latent attention, output gates)."""
    facts = runner.facts
    heads = [head_weights(runner, "decoder.attn", layer, h, length, length) for h in range(facts.n_heads)]
    first = heads[0]
    if first.latent is not None or first.gate is not None:
        kind = "multi-head latent attention" if first.latent is not None else "a gate on each head's output"
        raise UserError(f"{facts.model_id} has {kind}: its heads do not read the stream through one query, key "
                        "and value projection each, which the circuit's graph needs.")
    d_model, d_head = first.w_q.shape
    w = {letter: _stack([getattr(h, f"w_{letter}") for h in heads], d_head) for letter in "qkv"}
    w["o"] = torch.as_tensor(np.asarray(first.w_o, np.float32)).reshape(facts.n_heads, d_head, -1)
    b = {letter: _stack([getattr(h, f"b_{letter}") for h in heads], d_head) for letter in "qkv"}
    b["o"] = torch.zeros(d_model) if first.b_o is None else torch.as_tensor(np.asarray(first.b_o, np.float32))
    window = facts.windows[layer] if facts.windows else 0
    mask = causal_mask(length, None)[0, 0]
    if window:
        mask = mask & (torch.arange(length)[:, None] - torch.arange(length)[None, :] < window)
    rotary = None if first.rotary is None else (torch.as_tensor(first.rotary.cos), torch.as_tensor(first.rotary.sin),
                                                first.rotary.interleaved)
    found = LayerHeads(layer, norm_module(runner, f"decoder.{layer}.ln1.hook_normalized"), w, b, first.scale, mask,
                       rotary, _norms(heads), first.softcap, _bias(heads), first.l2_eps,
                       None if first.query_scale is None else torch.as_tensor(first.query_scale),
                       None if first.sink is None else torch.tensor([h.sink for h in heads], dtype=torch.float32))
    return found.to(device)


def _norms(heads: list[HeadWeights]) -> dict[str, tuple[torch.Tensor, float, tuple[torch.Tensor, torch.Tensor] | None]]:
    found = {}
    for letter in "qk":
        norms = [getattr(h, f"{letter}_norm") for h in heads]
        if norms[0] is None:
            continue
        whole = norms[0].whole
        spanned = None if whole is None else (torch.as_tensor(np.asarray(whole[0], np.float32)),
                                              torch.zeros(whole[0].shape[1]) if whole[1] is None
                                              else torch.as_tensor(np.asarray(whole[1], np.float32)))
        found[letter] = (_stack([n.gain for n in norms], len(norms[0].gain)), norms[0].eps, spanned)
    return found


def _bias(heads: list[HeadWeights]) -> torch.Tensor | None:
    if heads[0].position_bias is None:
        return None
    return torch.stack([torch.as_tensor(np.asarray(h.position_bias, np.float32)) for h in heads])
