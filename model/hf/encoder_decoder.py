"""An encoder-decoder's two halves called apart, under the app's own masks: the encoder once, the decoder on it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.masks import additive_mask


def encode_source(model: nn.Module, src: torch.Tensor, allowed: torch.Tensor) -> Any:
    """An encoder-decoder's encoder on src (batch, src_len) under `allowed` (batch or 1, 1, src_len, src_len)."""
    return model.get_encoder()(input_ids=src, attention_mask=additive_mask(allowed.to(src.device), model.dtype))


def decode_target(model: nn.Module, encoder_out: Any, real_keys: torch.Tensor, target: torch.Tensor,
                  allowed: torch.Tensor) -> Any:
    """Its decoder reading target (batch, tgt_len) under `allowed` (batch or 1, 1, tgt_len, tgt_len), attending to
    the encoder's real positions (real_keys: (batch, src_len), 1 = a real token)."""
    return model(encoder_outputs=encoder_out, attention_mask=real_keys, use_cache=False, decoder_input_ids=target,
                 decoder_attention_mask=additive_mask(allowed.to(target.device), model.dtype))
