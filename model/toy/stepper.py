"""A toy model's generation pass, one token at a time, for the Generate page (model/core/generation/decoding.py)."""

from __future__ import annotations

import torch

from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.masks import padding_mask, self_attention_mask
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.scratch.transformer import EncoderDecoder
from attention_atlas.model.toy.store import ToyModel

PATTERNS = ("decoder.*attn.hook_pattern",)  # self- and cross-attention of every decoder layer


def toy_stepper(toy: ToyModel, text: str, options: RunOptions) -> Stepper:
    """Generation from `text` under the causal choice of `options` (every step re-reads the whole context: the
    toy models are small). ValueError for a text the model cannot read."""
    model, tok = toy.model, toy.tokenizer
    source = toy.encode_source(text)
    device = model.device

    def tensor(ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=device)

    def self_mask(n: int) -> torch.Tensor:  # (1, 1, n, n)
        return self_attention_mask(n, n, options.causal_for("decoder"), (), device)

    if not isinstance(model, EncoderDecoder):
        def forward_decoder_only(ids: list[int]) -> tuple[torch.Tensor, dict]:
            log_probs, captured = capture(model, model.hook_points, PATTERNS,
                                          lambda: model(tensor(ids), self_mask(len(ids))))
            return log_probs[0, -1], captured  # (vocab,)

        return Stepper(source, forward_decoder_only, {tok.eos_id}, model.cfg.max_len, tok.tokens, tok.decode)

    src = tensor(source)
    enc_mask = self_attention_mask(len(source), len(source), options.causal_for("encoder"), (), device)
    cross_mask = padding_mask(src, tok.pad_id)  # (1, 1, 1, src_len)
    with torch.inference_mode():
        memory = model.encode(src, enc_mask)  # (1, src_len, d_model), read by every step

    def forward(ids: list[int]) -> tuple[torch.Tensor, dict]:
        log_probs, captured = capture(
            model, model.hook_points, PATTERNS,
            lambda: model.generator(model.decode(memory, tensor(ids), self_mask(len(ids)), cross_mask)))
        return log_probs[0, -1], captured

    return Stepper([tok.bos_id], forward, {tok.eos_id}, model.cfg.max_len, tok.tokens, tok.decode, source=source)
