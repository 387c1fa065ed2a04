"""Batched greedy decoding for the from-scratch models."""

from __future__ import annotations

import torch

from attention_atlas.model.core.masks import causal_mask, padding_mask
from attention_atlas.model.scratch.transformer import DecoderOnly, EncoderDecoder


@torch.inference_mode()
def greedy_encoder_decoder(
    model: EncoderDecoder, src: torch.Tensor, bos_id: int, eos_id: int, max_new: int
) -> torch.Tensor:
    """src: (batch, src_len), right-padded. -> generated ids (batch, <= max_new), without <s>,
    each row ending at its first </s> and padded after it."""
    pad_id = model.cfg.pad_id
    src_mask = padding_mask(src, pad_id)  # (batch, 1, 1, src_len)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_new):
        hidden = model.decode(memory, ys, causal_mask(ys.size(1), src.device), src_mask)
        next_ids = model.generator(hidden[:, -1:]).argmax(dim=-1).squeeze(1)  # (batch,)
        next_ids = next_ids.masked_fill(done, pad_id)
        ys = torch.cat([ys, next_ids[:, None]], dim=1)
        done |= next_ids == eos_id
        if bool(done.all()):
            break
    return ys[:, 1:]


@torch.inference_mode()
def greedy_decoder_only(model: DecoderOnly, prompt: torch.Tensor, eos_id: int, max_new: int) -> torch.Tensor:
    """prompt: (batch, prompt_len), all the same length. -> generated ids (batch, <= max_new)."""
    pad_id = model.cfg.pad_id
    ys = prompt
    done = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)
    for _ in range(min(max_new, model.cfg.max_len - prompt.size(1))):
        log_probs = model(ys, causal_mask(ys.size(1), prompt.device))[:, -1]  # (batch, vocab)
        next_ids = log_probs.argmax(dim=-1).masked_fill(done, pad_id)
        ys = torch.cat([ys, next_ids[:, None]], dim=1)
        done |= next_ids == eos_id
        if bool(done.all()):
            break
    return ys[:, prompt.size(1):]
