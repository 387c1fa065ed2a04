"""Edited runs of a Hugging Face model in one batch: each row of the batch with its own heads ablated, or its own
activation of a clean run patched in; and a run whose edits keep the values a gradient is taken of."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.attention.arrays import as_tensor
from attention_atlas.model.core.capture.ablation import Outcome, ablating_rows
from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.patching import Patch, metric_gradients
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import additive_mask
from attention_atlas.model.core.options import AblationMode, Head
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.encoder_decoder import decode_target, encode_source
from attention_atlas.model.hf.inputs import masked_inputs
from attention_atlas.model.hf.patching import editing_taps, patching_rows
from attention_atlas.model.hf.placement import input_device


def ablation_outcomes(model: nn.Module, taps: dict[str, ModuleTap | ReportedTap], kind: str, n_heads: int,
                      trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome:
    """What `trace`'s input leads to, once per row of `rows` (the heads ablated in that row), in one batch
    (`edited_outcomes`)."""
    return edited_outcomes(model, kind, trace, len(rows), ablating_rows(taps, rows, mode, n_heads))


def patched_outcomes(model: nn.Module, taps: dict[str, ModuleTap | ReportedTap], kind: str, trace: Trace,
                     clean: dict[str, np.ndarray], rows: Sequence[Patch | None]) -> Outcome:
    """What `trace`'s input (the corrupted text) leads to, once per row of `rows` (the clean run's activation
    patched in, or None), in one batch (`edited_outcomes`)."""
    return edited_outcomes(model, kind, trace, len(rows), patching_rows(model, taps, rows, clean))


def edited_outcomes(model: nn.Module, kind: str, trace: Trace, batch: int,
                    edits: AbstractContextManager[None]) -> Outcome:
    """What `trace`'s input leads to in each of `batch` rows under `edits` (each row's own): a causal LM's
    next-token log-probabilities after the last token, an encoder-decoder's at every output position (reading the
    trace's output), an encoder's last-layer vectors. The trace must be unpadded."""
    with edits, torch.inference_mode():
        if kind == "encoder":
            ids, masks = _inputs(model, trace, batch)
            allowed = next(iter(masks.values()))  # its one site
            hidden = model(input_ids=ids, attention_mask=additive_mask(allowed, model.dtype))
            return Outcome("embeddings", hidden.last_hidden_state.float().cpu().numpy(),  # (batch, len, d)
                           tuple(range(len(trace.ids))))
        logits, positions = _logits(model, kind, trace, batch)
        return Outcome("distributions", logits.float().log_softmax(-1).cpu().numpy(), positions)


def gradients(model: nn.Module, taps: Mapping[str, object], kind: str, trace: Trace, hooks: Sequence[str],
              position: int, metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
    """The gradient of `metric(the logits (vocab,) predicted after `position` of the decoder's sequence)` with respect
    to each hook's value in a run of `trace`'s input (`metric_gradients`)."""
    def logits() -> torch.Tensor:
        found, positions = _logits(model, kind, trace, 1)
        if position not in positions:
            raise UserError(f"This model's runs here read the prediction after token {positions[0]} or later, not "
                            f"{position}.")
        return found[0, positions.index(position)]  # (vocab,)

    return metric_gradients(partial(editing_taps, model), taps, hooks, logits, metric)


def _inputs(model: nn.Module, trace: Trace, batch: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`trace`'s ids (batch, len) and each site's mask (batch, 1, q_len, k_len), on the model's input device."""
    if trace.options.pad_to:
        raise UserError("Ablation and patching read the text as typed: turn padding off.")
    device = input_device(model)
    ids = torch.tensor([trace.ids], device=device).expand(batch, -1)
    masks = {site: as_tensor(mask, device)[None, None].expand(batch, 1, -1, -1)
             for site, mask in trace.masks.items()}
    return ids, masks


def _logits(model: nn.Module, kind: str, trace: Trace, batch: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """The logits (batch, positions, vocab) of a causal LM after the last token, of an encoder-decoder at every output
    position (reading the trace's output), and those positions of the decoder's sequence."""
    ids, masks = _inputs(model, trace, batch)
    if kind == "encoder-decoder":
        target = torch.tensor([trace.target_ids], device=ids.device).expand(batch, -1)
        real_keys = masks["decoder.cross_attn"][:, 0, 0].long()  # (batch, src_len)
        out = decode_target(model, encode_source(model, ids, masks["encoder.attn"]), real_keys, target,
                            masks["decoder.attn"])
        return out.logits, tuple(range(len(trace.target_ids)))  # (batch, tgt_len, vocab)
    allowed = next(iter(masks.values()))  # its one site
    logits = model(**masked_inputs(ids, allowed, model.dtype), logits_to_keep=1).logits  # (batch, 1, vocab)
    return logits, (len(trace.ids) - 1,)
