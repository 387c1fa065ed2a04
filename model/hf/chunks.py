"""Chunked attention (Llama 4): in a layer of type "chunked_attention", a query sees only the keys of its own chunk of
`attention_chunk_size` positions (0..c-1, c..2c-1, ...), causally inside it, as transformers' own chunked masks hide
them (masking_utils.chunked_overlay, with no left padding: the app pads on the right)."""

from __future__ import annotations

import torch
from torch import nn


def chunk_size(module: nn.Module) -> int:
    """The chunk the attention `module` reads within (0: none): its config's `attention_chunk_size` where its layer's
    type (config.layer_types[module.layer_idx]) is "chunked_attention"."""
    config, layer = getattr(module, "config", None), getattr(module, "layer_idx", None)
    types = getattr(config, "layer_types", None)
    if layer is None or not types or layer >= len(types) or types[layer] != "chunked_attention":
        return 0
    return int(getattr(config, "attention_chunk_size", None) or 0)


def chunked(mask: torch.Tensor | None, chunk: int, q_len: int, k_len: int,
            device: torch.device) -> torch.Tensor | None:
    """The additive mask (batch or 1, 1, q_len, >= k_len) with the keys outside each query's chunk hidden too, where
    the queries are the keys (q_len == k_len: positions 0..len-1, as in the app's runs and a first pass of
    `generate`). With a KV cache (q_len < k_len) the mask is transformers' own, made knowing where the cache starts
    (a chunked layer's cache keeps only its last keys), and stays what it is. Made once per mask and chunk on a
    thread, since every chunked layer reads the same; kept while `mask` lives."""
    if not chunk or q_len != k_len or chunk >= k_len:
        return mask
    from attention_atlas.model.hf.heads import made_once  # here: heads imports this module

    def hide_other_chunks() -> torch.Tensor:
        chunks = torch.arange(k_len, device=device) // chunk  # (k_len,): each position's chunk
        apart = chunks[:, None] != chunks[None]  # (q_len, k_len)
        dtype = torch.float32 if mask is None else mask.dtype
        base = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device) if mask is None else mask[..., :k_len]
        return base.masked_fill(apart, torch.finfo(dtype).min)

    if mask is None:
        return hide_other_chunks()
    return made_once(mask, ("chunk", chunk, q_len, k_len), hide_other_chunks)
