"""A tiny random Llama 4 text model (`llama4_text`: a chunked layer and a NoPE layer), built in a folder from its
config class (no hub), in the variants of its position settings."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer

CHUNK = 3
LLAMA4 = {"head_dim": 8, "attention_chunk_size": CHUNK, "intermediate_size_mlp": 64, "num_local_experts": 2,
          "no_rope_layers": [1, 0], "layer_types": ["chunked_attention", "full_attention"]}
VARIANTS = {  # transformers' defaults tune the temperature and norm q/k; a floor_scale of 2 makes tuning matter here
    "plain": {"attn_temperature_tuning": False, "use_qk_norm": False},
    "qk-norm": {"attn_temperature_tuning": False, "use_qk_norm": True},
    "temperature": {"attn_temperature_tuning": True, "floor_scale": 2, "attn_scale": 0.5, "use_qk_norm": False},
    "both": {"attn_temperature_tuning": True, "floor_scale": 2, "attn_scale": 0.5, "use_qk_norm": True},
}


def build_llama4(folder: Path, **overrides: object) -> Path:
    """A tiny random Llama 4 text model (layer 0 chunked and rotary, layer 1 full and NoPE) and its tokenizer."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model("llama4_text", vocab_size=vocab, **(SHARED | LLAMA4 | overrides))
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder
