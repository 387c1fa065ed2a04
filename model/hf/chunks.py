"""Chunked attention (Llama 4): in a layer of type "chunked_attention", a query sees only the keys of its own chunk of
`attention_chunk_size` positions (0..c-1, c..2c-1, ...), causally inside it, as transformers' own chunked masks hide
them (masking_utils.chunked_overlay, with no left padding: the app pads on the right)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attention_atlas.model.hf.made_once import made_once


def layer_chunks(config: Any) -> list[int]:
    """Each decoder layer's chunk (0: the layer is not chunked); [] where no layer is (ModelFacts.chunks)."""
    types = list(getattr(config, "layer_types", None) or [])
    size = int(getattr(config, "attention_chunk_size", None) or 0)
    chunks = [size if kind == "chunked_attention" else 0 for kind in types]
    return chunks if any(chunks) else []


def chunk_words(chunks: list[int]) -> str:
    """What chunked layers let a token see, in words: "layer 0: each token sees only the tokens of its own chunk of 3
    positions (0–2, 3–5, …) up to itself; the other layers see every token before it"."""
    chunked_layers = [str(i) for i, c in enumerate(chunks) if c]
    layers = ("every layer" if all(chunks) else
              f"layer{'s' if len(chunked_layers) > 1 else ''} {', '.join(chunked_layers)}")
    size = max(chunks)
    rest = "" if all(chunks) else "; the other layers see every token before it"
    return (f"{layers}: each token sees only the tokens of its own chunk of {size} positions (0–{size - 1}, "
            f"{size}–{2 * size - 1}, …) up to itself{rest}")


def chunk_size(module: nn.Module) -> int:
    """The chunk the attention `module` reads within (0: none): its config's `attention_chunk_size` where its layer's
    type (config.layer_types[module.layer_idx]) is "chunked_attention"."""
    config, layer = getattr(module, "config", None), getattr(module, "layer_idx", None)
    types = getattr(config, "layer_types", None)
    if layer is None or not types or layer >= len(types) or types[layer] != "chunked_attention":
        return 0
    return int(getattr(config, "attention_chunk_size", None) or 0)


def chunked(mask: torch.Tensor | None, chunk: int, q_len: int, k_len: int, device: torch.device
            ) -> torch.Tensor | None:
    """The additive mask (batch or 1, 1, q_len, >= k_len) with the keys outside each query's chunk hidden too, where
    the queries are the keys (q_len == k_len: positions 0..len-1, as in the app's runs and a first pass of
    `generate`). With a KV cache (q_len < k_len) the mask is transformers' own, made knowing where the cache starts
    (a chunked layer's cache keeps only its last keys), and stays what it is. Made once per mask and chunk on a
    thread (`made_once`), since every chunked layer reads the same; kept while `mask` lives."""
    if not chunk or q_len != k_len or chunk >= k_len:
        return mask

    def hide_other_chunks() -> torch.Tensor:
        chunks = torch.arange(k_len, device=device) // chunk  # (k_len,): each position's chunk
        apart = chunks[:, None] != chunks[None]  # (q_len, k_len)
        dtype = torch.float32 if mask is None else mask.dtype
        base = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device) if mask is None else mask[..., :k_len]
        return base.masked_fill(apart, torch.finfo(dtype).min)

    if mask is None:
        return hide_other_chunks()
    return made_once(mask, ("chunk", chunk, q_len, k_len), hide_other_chunks)
