"""A Hugging Face model's generation pass, one token at a time, for the Generate page
(model/core/generation/decoding.py).

A causal LM under its trained masks keeps a KV cache (model/hf/kv_cache.py): each step feeds only the tokens the
cache has not seen and captures the new query's attention row in every layer. Under other masks (no causal
mask) every step re-reads the whole sequence under them, as the traced pass does. An encoder-decoder encodes
the source once and re-reads the decoder's whole input at each step (its decoder may run without its mask)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.masks import self_attention_mask
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.encoder_decoder import decode_target, encode_source
from attention_atlas.model.hf.inputs import masked_inputs
from attention_atlas.model.hf.kv_cache import cache_argument
from attention_atlas.model.hf.placement import input_device
from attention_atlas.model.hf.text import TokenText, eos_ids

Taps = Mapping[str, ModuleTap | ReportedTap]  # a loaded model's hook name -> where its value is read
SELF_PATTERNS = ("decoder.*.attn.hook_pattern",)
DECODER_PATTERNS = ("decoder.*attn.hook_pattern",)  # self- and cross-attention


def hf_stepper(model: nn.Module, taps: Taps, kind: str, tokens: TokenText, text: str, options: RunOptions,
               use_cache: bool = True) -> Stepper:
    """Generation from `text` with a loaded model (`kind`: encoder, decoder or encoder-decoder) and its hook `taps`;
    use_cache=False re-reads the whole sequence at every step even where a KV cache could be used."""
    if kind == "encoder":
        raise UserError(f"{tokens.model_id} is an encoder: it reads text but does not generate any.")
    ids = tokens.encode(text)
    eos, limit = eos_ids(model), tokens.max_tokens

    def decode(generated: list[int]) -> str:
        return tokens.decode(generated, skip_special_tokens=True)

    if kind == "encoder-decoder":
        return Stepper([model.config.decoder_start_token_id], _seq2seq_forward(model, taps, ids, options), eos, limit,
                       tokens.tokens, decode, source=ids)
    cached = use_cache and options.trained_masks
    forward = _cached_forward(model, taps) if cached else _full_forward(model, taps, options.causal_for("decoder"))
    prompt = decode(ids)

    def continuation(generated: list[int]) -> str:  # decoded with the prompt: a word's leading space is kept
        return decode([*ids, *generated])[len(prompt):]

    return Stepper(ids, forward, eos, limit, tokens.tokens, continuation)


def _full_forward(model: nn.Module, taps: Taps, causal: bool):
    """Every step reads the whole sequence under the chosen causal mask."""

    def forward(ids: list[int]) -> tuple[torch.Tensor, dict]:
        allowed = self_attention_mask(len(ids), len(ids), causal, (), input_device(model))
        out, captured = capture(model, taps, SELF_PATTERNS, lambda: model(
            **masked_inputs(torch.tensor([ids], device=input_device(model)), allowed, model.dtype), logits_to_keep=1,
            use_cache=False))
        return out.logits[0, -1], captured

    return forward


def _cached_forward(model: nn.Module, taps: Taps):
    """Each step feeds the tokens its KV cache has not seen (all of them at the first step, then one)."""
    state: dict[str, Any] = {"cache": DynamicCache(config=model.config), "seen": []}

    def forward(ids: list[int]) -> tuple[torch.Tensor, dict]:
        seen = state["seen"]
        if ids[: len(seen)] != seen or len(ids) <= len(seen):  # another branch (a forced token): start again
            state["cache"], seen = DynamicCache(config=model.config), []
        new = torch.tensor([ids[len(seen):]], device=input_device(model))
        out, captured = capture(model, taps, SELF_PATTERNS, lambda: model(
            input_ids=new, **cache_argument(model, state["cache"]), use_cache=True, logits_to_keep=1,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=input_device(model))))
        state["seen"] = list(ids)
        return out.logits[0, -1], captured

    return forward


def _seq2seq_forward(model: nn.Module, taps: Taps, source: list[int], options: RunOptions):
    """The encoder once (under the chosen masks), then the decoder's whole input at each step."""
    device = input_device(model)
    src = torch.tensor([source], device=device)
    enc_allowed = self_attention_mask(len(source), len(source), options.causal_for("encoder"), (), device)
    with torch.inference_mode():
        memory = encode_source(model, src, enc_allowed)
    keys = torch.ones(1, len(source), dtype=torch.long, device=device)

    def forward(ids: list[int]) -> tuple[torch.Tensor, dict]:
        allowed = self_attention_mask(len(ids), len(ids), options.causal_for("decoder"), (), device)
        out, captured = capture(model, taps, DECODER_PATTERNS, lambda: decode_target(
            model, memory, keys, torch.tensor([ids], device=device), allowed))
        return out.logits[0, -1], captured

    return forward
