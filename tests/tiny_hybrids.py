"""Tiny random hybrid models (softmax attention layers among state-space, linear-attention or convolution layers),
each built from its own transformers config class: four layers, two of them softmax attention (blocks 1 and 3),
except Falcon-H1, whose every layer runs attention and Mamba-2 side by side."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer

MAMBA2: dict[str, object] = {"mamba_n_heads": 4, "mamba_d_head": 16,  # 4 heads x 16 = 2 x hidden_size
                             "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
                             "mamba_chunk_size": 8}
DELTA_NET: dict[str, object] = {"head_dim": 8, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                                "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                "layer_types": ["linear_attention", "full_attention"] * 2}
HYBRID_TYPES: dict[str, dict[str, object]] = {  # model type -> its config's settings beyond tiny_hf.SHARED
    "qwen3_next": DELTA_NET | {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                               "shared_expert_intermediate_size": 32},  # gated delta-net, gated attention, experts
    "qwen3_5_text": DELTA_NET,  # AutoModelForCausalLM's Qwen3.5 (its text model)
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
              "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
              "mamba_dt_rank": 4},  # Mamba (v1); experts in the attention layers
    "granitemoehybrid": MAMBA2 | {"layer_types": ["mamba", "attention"] * 2, "num_local_experts": 4,
                                  "num_experts_per_tok": 2, "shared_intermediate_size": 32},
    "nemotron_h": MAMBA2 | {"layers_block_type": ["mamba", "attention", "mlp", "attention"], "head_dim": 8},
    "kimi_linear": {"num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 6, "qk_head_dim": 12, "linear_head_dim": 8,
                    "linear_num_heads": 4, "num_experts": 4, "num_experts_per_token": 2, "moe_intermediate_size": 32,
                    "layer_types": ["linear_attention", "full_attention"] * 2,
                    "mlp_layer_types": ["dense", "sparse"] * 2},
    # Kimi delta attention; latent attention (DeepSeek's) in its softmax layers, experts there
    "lfm2": {"layer_types": ["conv", "full_attention"] * 2, "conv_L_cache": 3},  # short convolutions
    "falcon_h1": MAMBA2 | {"num_hidden_layers": 2, "head_dim": 8, "mamba_d_ssm": 64},  # attention + Mamba-2, parallel
}
ATTENTION_BLOCKS = {model_type: (1, 3) for model_type in HYBRID_TYPES} | {"falcon_h1": (0, 1)}


def build_hybrid(model_type: str, folder: Path) -> Path:
    """Save a tiny random `model_type` (one of HYBRID_TYPES) and a word-level tokenizer into `folder`."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    settings = SHARED | {"num_hidden_layers": 4} | HYBRID_TYPES[model_type]
    config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **settings)
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


def build_qwen3_5_checkpoint(folder: Path) -> transformers.PreTrainedModel:
    """Save a tiny Qwen3.5 as its checkpoints come (model type "qwen3_5": a vision tower beside the language model,
    whose weights are under model.language_model) into `folder`; returns the model saved."""
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    text = transformers.AutoConfig.for_model("qwen3_5_text", vocab_size=vocab, **(
        SHARED | {"num_hidden_layers": 4} | HYBRID_TYPES["qwen3_5_text"]))
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32,
              "num_position_embeddings": 16, "patch_size": 4}
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(
        transformers.Qwen3_5Config(text_config=text.to_dict(), vision_config=vision)).eval()
    model.save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return model


def build_lively_mamba2(model_type: str, folder: Path) -> Path:
    """`build_hybrid`, its Mamba-2 layers' steps and projections made larger (dt about 1, the projection x 20), so that
    their scans mix tokens as much as a trained model's do (a random init's scan is mostly each token's own x_t)."""
    build_hybrid(model_type, folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "A_log") and hasattr(module, "dt_bias") and hasattr(module, "in_proj"):
                module.dt_bias.fill_(0.5)
                module.in_proj.weight.mul_(20.0)
    model.save_pretrained(folder)
    return folder
