"""A pre-norm from-scratch decoder (model/scratch/, `toy-induction`) in TransformerLens 3.9: the same weights mapped
by hand onto a HookedTransformer, for the tests that hold the toy's circuits to TransformerLens and the EAP-IG
library. The toy's blocks are TransformerLens's own (LayerNorm, pre-norm attention then a ReLU MLP, every projection
with its bias): its embeddings are scaled by sqrt(d_model) before the sinusoidal positions are added (folded into
W_E, the positions a `standard` W_pos), its fused in_proj rows [W_Q; W_K; W_V] are cut into each head's, and its
generator's projection (tied to the embedding) and bias are W_U and b_U. The toy gives log-probabilities,
TransformerLens logits: their differences are the same."""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig  # make installs 3.9

from attention_atlas.model.scratch.transformer import DecoderOnly


def toy_reference(model: DecoderOnly) -> HookedTransformer:
    """TransformerLens's model holding a pre-norm from-scratch decoder's weights."""
    cfg = model.cfg
    assert cfg.norm == "pre" and cfg.kind == "decoder", "TransformerLens's blocks are pre-norm decoders'"
    config = HookedTransformerConfig(
        d_model=cfg.d_model, d_head=cfg.d_head, n_heads=cfg.n_heads, d_mlp=cfg.d_ff, n_layers=cfg.n_decoder_layers,
        n_ctx=cfg.max_len, d_vocab=cfg.vocab_size, act_fn="relu", normalization_type="LN", eps=cfg.layer_norm_eps,
        positional_embedding_type="standard", dtype=torch.float32, default_prepend_bos=False)
    stack, heads, d_head = model.decoder, cfg.n_heads, cfg.d_head
    state = {"embed.W_E": stack.embedding.weight * stack.scale, "pos_embed.W_pos": stack.pos_table[:cfg.max_len],
             "ln_final.w": stack.ln_final.weight, "ln_final.b": stack.ln_final.bias,
             "unembed.W_U": model.generator.proj.weight.T, "unembed.b_U": model.generator.proj.bias}
    for i, layer in enumerate(stack.layers):
        w, b = layer.attn.in_proj.weight, layer.attn.in_proj.bias  # (3 d_model, d_model), (3 d_model,)
        for j, letter in enumerate("QKV"):
            rows = w[j * cfg.d_model:(j + 1) * cfg.d_model]  # (heads x d_head, d_model)
            state[f"blocks.{i}.attn.W_{letter}"] = rows.reshape(heads, d_head, -1).transpose(1, 2)
            state[f"blocks.{i}.attn.b_{letter}"] = b[j * cfg.d_model:(j + 1) * cfg.d_model].reshape(heads, d_head)
        state[f"blocks.{i}.attn.W_O"] = layer.attn.out_proj.weight.T.reshape(heads, d_head, -1)
        state[f"blocks.{i}.attn.b_O"] = layer.attn.out_proj.bias
        for norm in ("ln1", "ln2"):
            state[f"blocks.{i}.{norm}.w"] = getattr(layer, norm).weight
            state[f"blocks.{i}.{norm}.b"] = getattr(layer, norm).bias
        state[f"blocks.{i}.mlp.W_in"] = layer.mlp.linear1.weight.T
        state[f"blocks.{i}.mlp.b_in"] = layer.mlp.linear1.bias
        state[f"blocks.{i}.mlp.W_out"] = layer.mlp.linear2.weight.T
        state[f"blocks.{i}.mlp.b_out"] = layer.mlp.linear2.bias
    reference = HookedTransformer(config)
    missing, unexpected = reference.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    assert not unexpected and all(k.endswith(("mask", "IGNORE")) for k in missing), (missing, unexpected)
    return reference.eval()
