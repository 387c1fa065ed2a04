"""Exact-match accuracy of a toy model on (source, target) pairs, with batched greedy decoding."""

from __future__ import annotations

from collections import defaultdict

import torch

from attention_atlas.model.scratch.decode import greedy_decoder_only, greedy_encoder_decoder
from attention_atlas.model.scratch.transformer import DecoderOnly, EncoderDecoder
from attention_atlas.model.toy.store import ToyModel


def pad_batch(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad lists of ids to one (batch, max_len) tensor."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


def predict(toy: ToyModel, sources: list[str], batch_size: int = 500) -> list[str]:
    """Greedy outputs for many sources (decoder-only prompts are batched by length)."""
    tok, model = toy.tokenizer, toy.model
    prompts = [toy.encode_source(s) for s in sources]
    groups: dict[int, list[int]] = defaultdict(list)
    for index, prompt in enumerate(prompts):
        groups[len(prompt) if isinstance(model, DecoderOnly) else 0].append(index)
    outputs: list[str] = [""] * len(sources)
    for indices in groups.values():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batch = pad_batch([prompts[i] for i in chunk], tok.pad_id).to(model.device)
            max_new = model.cfg.max_len - 1
            if isinstance(model, EncoderDecoder):
                generated = greedy_encoder_decoder(model, batch, tok.bos_id, tok.eos_id, max_new)
            else:
                generated = greedy_decoder_only(model, batch, tok.eos_id, max_new)
            for i, row in zip(chunk, generated.tolist(), strict=True):
                outputs[i] = tok.decode(row)
    return outputs


def exact_match(toy: ToyModel, pairs: list[tuple[str, str]]) -> float:
    """Share of sources whose greedy output equals the target exactly."""
    predictions = predict(toy, [source for source, _ in pairs])
    return sum(p == t for p, (_, t) in zip(predictions, pairs, strict=True)) / len(pairs)
