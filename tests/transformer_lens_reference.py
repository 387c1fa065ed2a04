"""The same tiny random weights in TransformerLens 3.9 (its own weight conversions): what the tests that compare with
TransformerLens run beside this project's runners."""

from __future__ import annotations

import torch
import transformers
from transformer_lens import HookedEncoder, HookedTransformer, HookedTransformerConfig  # make installs 3.9
from transformer_lens.pretrained.weight_conversions.bert import convert_bert_weights
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
from transformer_lens.pretrained.weight_conversions.llama import convert_llama_weights


def transformer_lens_config(family: str, c) -> HookedTransformerConfig:
    """The HookedTransformerConfig of a tiny GPT-2, Llama or BERT config (its loader reads the hub's names only)."""
    if family == "bert":
        return HookedTransformerConfig(
            d_model=c.hidden_size, d_head=c.hidden_size // c.num_attention_heads, n_heads=c.num_attention_heads,
            d_mlp=c.intermediate_size, n_layers=c.num_hidden_layers, n_ctx=c.max_position_embeddings,
            d_vocab=c.vocab_size, act_fn="gelu", normalization_type="LN", eps=c.layer_norm_eps, dtype=torch.float32,
            attention_dir="bidirectional", original_architecture="BertForMaskedLM")
    if family == "gpt2":
        return HookedTransformerConfig(
            d_model=c.n_embd, d_head=c.n_embd // c.n_head, n_heads=c.n_head, d_mlp=4 * c.n_embd, n_layers=c.n_layer,
            n_ctx=c.n_positions, d_vocab=c.vocab_size, act_fn="gelu_new", normalization_type="LN",
            eps=c.layer_norm_epsilon, dtype=torch.float32, default_prepend_bos=False)
    return HookedTransformerConfig(
        d_model=c.hidden_size, d_head=c.hidden_size // c.num_attention_heads, n_heads=c.num_attention_heads,
        d_mlp=c.intermediate_size, n_layers=c.num_hidden_layers, n_ctx=c.max_position_embeddings,
        d_vocab=c.vocab_size, act_fn="silu", normalization_type="RMS", positional_embedding_type="rotary",
        rotary_dim=c.hidden_size // c.num_attention_heads, final_rms=True, gated_mlp=True,
        n_key_value_heads=c.num_key_value_heads, eps=c.rms_norm_eps, dtype=torch.float32, default_prepend_bos=False)


def reference_of(family: str, model: torch.nn.Module) -> HookedTransformer | HookedEncoder:
    """TransformerLens's model holding `model`'s weights (BERT's conversion reads a BertForPreTraining: its heads,
    which no hook here reads, stay random)."""
    config = transformer_lens_config(family, model.config)
    if family == "bert":
        pretraining = transformers.BertForPreTraining(model.config)
        pretraining.bert.load_state_dict(model.state_dict())
        reference = HookedEncoder(config)
        reference.load_state_dict(convert_bert_weights(pretraining, config), strict=False)
        return reference
    reference = HookedTransformer(config)
    convert = convert_gpt2_weights if family == "gpt2" else convert_llama_weights
    reference.load_state_dict(convert(model, config), strict=False)
    return reference


def randomise_norms(model: torch.nn.Module) -> None:
    """Norm weights unlike 1 and 0, where the meanings of hook_normalized before and after them would agree."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or ".ln" in name:
                parameter.uniform_(0.5, 1.5)
