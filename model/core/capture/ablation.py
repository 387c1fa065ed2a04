"""Head ablation: one or more heads' outputs replaced in this thread's runs, never in the shared model.

A head is named by its attention site and index: ("decoder.3.attn", 2) is head 2 of the decoder's layer-3
self-attention, whose output is `decoder.3.attn.hook_z` (cross-attention: "decoder.3.cross_attn"). Its output z
(pos, d_head), pattern x V before W_O, is replaced at every position:
- zero: by 0, so the head adds nothing to the residual stream (W_O's bias, shared by all heads, stays);
- mean: by its mean over the positions of the pass, so the head adds the same vector to every token and
  carries no information about which token it reads.

The edit is applied where z is computed (model/core/capture/hooks.py `editing`), on the running thread only: another
session running the same model at the same moment sees it whole. A batch can ablate different heads in each of
its rows (`ablating_rows`), which is how a scan of every head runs in a few passes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attention_atlas.model.core.capture.hooks import Edit, HookPoint, ReportedTap, editing
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import ABLATION_MODES, AblationMode, Head

ALL_ROWS = -1  # a row index meaning every row of the batch


def head_hook(head: Head) -> str:
    """The hook whose value an ablation of `head` replaces: its site's `hook_z`."""
    return f"{head[0]}.hook_z"


def replace_heads(z: torch.Tensor, pairs: Sequence[tuple[int, int]], mode: AblationMode) -> torch.Tensor:
    """z (batch, heads, pos, d_head) with each (row, head) of `pairs` replaced (row ALL_ROWS: every row); a copy."""
    z = z.clone()
    for row, head in pairs:
        rows = slice(None) if row == ALL_ROWS else row
        if mode == "zero":
            z[rows, head] = 0
        else:
            z[rows, head] = z[rows, head].mean(dim=-2, keepdim=True)  # (…, 1, d_head) over the positions
    return z


def _edit(pairs: list[tuple[int, int]], mode: AblationMode) -> Edit:
    def edit(z: torch.Tensor) -> torch.Tensor:
        return replace_heads(z, pairs, mode)

    return edit


@contextmanager
def ablating_rows(
    taps: Mapping[str, object], rows: Sequence[Sequence[Head]], mode: AblationMode, n_heads: int
) -> Iterator[None]:
    """While inside, this thread's batched passes ablate in row b the heads `rows[b]`. `taps`: the model's
    hook name -> tap (a HookPoint, or a ReportedTap of the attention module's 'z')."""
    yield from _ablating(taps, [(row, head) for row, heads in enumerate(rows) for head in heads], mode, n_heads)


@contextmanager
def ablating(taps: Mapping[str, object], heads: Sequence[Head], mode: AblationMode, n_heads: int) -> Iterator[None]:
    """While inside, this thread's passes (of any batch size) ablate `heads`; nothing is changed when it is empty."""
    yield from _ablating(taps, [(ALL_ROWS, head) for head in heads], mode, n_heads)


def _ablating(
    taps: Mapping[str, object], pairs: list[tuple[int, Head]], mode: AblationMode, n_heads: int
) -> Iterator[None]:
    if not pairs:
        yield
        return
    if mode not in ABLATION_MODES:
        raise UserError(f"Unknown ablation {mode!r}: choose one of {', '.join(ABLATION_MODES)}.")
    by_hook: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row, head in pairs:
        if not 0 <= head[1] < n_heads:
            raise UserError(f"{head[0]} has heads 0–{n_heads - 1}; there is no head {head[1]}.")
        by_hook[head_hook(head)].append((row, head[1]))
    point_edits: dict[str, Edit] = {}
    reported_edits: dict[object, dict[str, Edit]] = {}
    for name, site_pairs in by_hook.items():
        tap = taps.get(name)
        if isinstance(tap, HookPoint):
            point_edits[name] = _edit(site_pairs, mode)
        elif isinstance(tap, ReportedTap):
            reported_edits.setdefault(tap.module, {})[tap.quantity] = _edit(site_pairs, mode)
        else:
            raise UserError(f"This model has no attention heads at {name.removesuffix('.hook_z')}.")
    with editing(point_edits, reported_edits):
        yield


@dataclass(frozen=True)
class Outcome:
    """What a model concludes from one input, once per row of a batch that ablates different heads per row.

    distributions: log-probabilities (rows, positions, vocab) of the next token at the positions that matter (a
    causal LM: the last token; a toy decoder-only model: from its prompt's last token on; an encoder-decoder: every
    output position, reading the output of the unablated run). embeddings (encoders): the last layer's vectors
    (rows, len, d_model)."""

    kind: Literal["distributions", "embeddings"]
    values: np.ndarray
    positions: tuple[int, ...]  # the positions (of the decoder's input for encoder-decoders) the values are at

    @property
    def nbytes(self) -> int:
        """Bytes held (what a byte-bounded cache counts)."""
        return self.values.nbytes

