"""The logit lens: a model's own final norm and unembedding applied to the residual stream after every layer,
read as a next-token distribution (nostalgebraist, 2020). At the last layer it is the model's own output.

Pre-norm models (GPT-2, Llama, T5, a pre-norm from-scratch model) read each layer's `hook_resid_post` through
the final norm; post-norm models (the paper's model, BART, Marian) have no final norm: each layer's output is
already normalised (`hook_normalized_resid_post`) and goes straight to the unembedding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

TOP_K = 5
ROWS_PER_CHUNK = 256  # (layer, position) rows unembedded at once: 256 x 49,152 float32 logits = 50 MB


@dataclass(frozen=True)
class Unembedding:
    """How a model turns its stack's residual stream into logits: `readout` maps (rows, d_model) to
    (rows, vocab) logits, including the final norm where the model has one; `layer_output` is the hook whose
    value at every layer feeds it."""

    stack: str  # "decoder" (or "encoder" for an encoder with an LM head)
    layer_output: str  # "hook_resid_post" (pre-norm) or "hook_normalized_resid_post" (post-norm)
    final_norm: str  # what comes before the unembedding, as a person reads it ("its final norm ln_f", ...)
    readout: Callable[[torch.Tensor], torch.Tensor]  # (rows, d_model) -> (rows, vocab) logits

    def hook(self, layer: int) -> str:
        return f"{self.stack}.{layer}.{self.layer_output}"


@dataclass(frozen=True)
class Lens:
    """The lens at every layer of some positions. Shapes: (layers, positions, TOP_K) and (layers, positions)."""

    positions: np.ndarray  # (positions,) which positions of the sequence
    top_ids: np.ndarray  # (layers, positions, k) the likeliest tokens at each layer
    top_probs: np.ndarray  # (layers, positions, k) their probabilities
    final_ids: np.ndarray  # (positions,) the model's own prediction: the last layer's top token
    final_ranks: np.ndarray  # (layers, positions) its rank at each layer (1 = the top)
    final_probs: np.ndarray  # (layers, positions) its probability at each layer

    @property
    def nbytes(self) -> int:
        arrays = (self.positions, self.top_ids, self.top_probs, self.final_ids, self.final_ranks, self.final_probs)
        return sum(a.nbytes for a in arrays)


def logit_lens(unembedding: Unembedding, residuals: np.ndarray, positions: np.ndarray, k: int = TOP_K) -> Lens:
    """residuals: (layers, positions, d_model), each layer's output at `positions`. The readout runs in chunks
    of ROWS_PER_CHUNK rows, so a 49k-token vocabulary never needs (layers x positions x vocab) at once."""
    layers, n, d_model = residuals.shape
    flat = torch.from_numpy(np.ascontiguousarray(residuals, dtype=np.float32)).reshape(-1, d_model)  # (layers*n, d)
    with torch.inference_mode():
        final_ids = unembedding.readout(flat[-n:]).argmax(-1)  # (n,) the model's own choice at the last layer
        wanted = final_ids.repeat(layers)  # (layers * n,) row r asks about final_ids[r % n]
        parts = [_read_chunk(unembedding, flat[s:s + ROWS_PER_CHUNK], wanted[s:s + ROWS_PER_CHUNK], k)
                 for s in range(0, len(flat), ROWS_PER_CHUNK)]
    top_probs, top_ids, probs, ranks = (torch.cat(column) for column in zip(*parts, strict=True))
    return Lens(positions=np.asarray(positions), top_ids=top_ids.reshape(layers, n, k).numpy(),
                top_probs=top_probs.reshape(layers, n, k).numpy(), final_ids=final_ids.numpy(),
                final_ranks=ranks.reshape(layers, n).numpy(), final_probs=probs.reshape(layers, n).numpy())


def _read_chunk(unembedding: Unembedding, rows: torch.Tensor, wanted: torch.Tensor,
                k: int) -> tuple[torch.Tensor, ...]:
    """rows: (r, d_model); wanted: (r,) a token id per row. -> top-k probabilities (r, k) and ids (r, k), the
    wanted token's probability (r, 1) and rank (r, 1), 1 = the top."""
    probs = unembedding.readout(rows).float().softmax(-1)  # (r, vocab)
    top = probs.topk(k, dim=-1)
    chosen = probs.gather(1, wanted[:, None])  # (r, 1)
    ranks = (probs > chosen).sum(-1, keepdim=True) + 1  # (r, 1)
    return top.values, top.indices, chosen, ranks
