"""GPT-Neo: computes attention in its own code (model/hf/own_attention.py routes it through the app's attention):
separate `q_proj`/`k_proj`/`v_proj` and `out_proj`, scores not scaled, and every other layer ("local") sliding over
the last `window_size` tokens; hooks found by discovery."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, Sizes, config_int
from attention_atlas.model.hf.heads import attention
from attention_atlas.model.hf.own_attention import route_modules


class GptNeoAdapter(Adapter):
    name = "GPT-Neo"
    model_types: ClassVar[tuple[str, ...]] = ("gpt_neo",)
    own_attention = True

    def prepare(self, model: nn.Module) -> None:
        route_modules(model, "GPTNeoSelfAttention", _self_attention)

    def scale(self, attention: nn.Module, d_head: int, layer: int) -> tuple[float, str]:
        return 1.0, "1 (GPT-Neo does not scale its scores)"

    def sizes(self, config: Any, stack: str) -> Sizes:
        d_model = config.hidden_size
        return Sizes(config.num_heads, config.num_heads, d_model, d_model // config.num_heads,
                     config_int(config, "intermediate_size", default=4 * d_model))


def _self_attention(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    layer_past: Any = None, use_cache: bool = False, output_attentions: bool = False,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    """GPTNeoSelfAttention's forward, its softmax(Q K^T + M) V by the app's attention: a local layer's window is
    the `window_size` tokens up to each query, itself included (transformers keeps it as the layer's causal buffer)."""
    query, key, value = (self._split_heads(projection(hidden_states), self.num_heads, self.head_dim)
                         for projection in (self.q_proj, self.k_proj, self.v_proj))  # (batch, heads, len, d_head)
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_id)
    window = self.config.window_size if self.attention_type == "local" else None
    dtype = query.dtype
    if dtype != torch.float32:  # unscaled scores overflow float16 and round coarsely in bfloat16: transformers
        # computes them in float32 for every dtype (GPTNeoSelfAttention._attn), and so does this
        query, key, value = query.float(), key.float(), value.float()
        attention_mask = None if attention_mask is None else attention_mask.float()
    out, _ = attention(self, query, key, value, attention_mask, scaling=1.0, sliding_window=window)
    return self.resid_dropout(self.out_proj(out.to(dtype).flatten(2))), None  # out: (batch, len, heads, d_head)
