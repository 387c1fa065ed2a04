"""A tiny random GPT-OSS (a learned sink logit a head in every row's softmax; sliding and full layers), built in a
folder from its config class (no hub)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer

GPT_OSS = {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 8, "sliding_window": 3,
           "layer_types": ["sliding_attention", "full_attention"]}
SINKS = (-1.0, 0.0, 1.0, 2.5)  # each layer's heads' sink logits: shares from a few hundredths to most of a row


def build_gpt_oss(folder: Path) -> Path:
    """Save the tiny GPT-OSS and a word-level tokenizer into `folder`; its sinks set to SINKS (a trained model's are
    far from the initial ones, which are about 0)."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model("gpt_oss", vocab_size=vocab, **(SHARED | GPT_OSS))
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.tensor(SINKS))
    model.save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder
