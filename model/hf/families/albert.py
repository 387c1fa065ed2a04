"""ALBERT: a BERT-style post-norm encoder whose blocks all apply one layer's weights (or one per group of blocks,
`num_hidden_groups`), and whose token embeddings are `embedding_size` wide (E, smaller than the blocks' H), mapped up
by `encoder.embedding_hidden_mapping_in` before the first block.

transformers calls the one layer module N times, so a hook on it could not tell the blocks apart. When the model
loads, each block is given a module of its own (`prepare`): copies of the shared layer's modules holding the very
same weight tensors (nothing is copied but the modules), called in turn by the encoder. Every hook then names its
block, and the weights are still one set: the model card says so."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
from torch import nn

from attention_atlas.model.hf.families.bert import BertAdapter, post_norm_encoder
from attention_atlas.model.hf.own_attention import route
from attention_atlas.model.hf.taps import Family, first_input, output

BLOCKS = "blocks"  # the encoder's list of one module per block, made by `prepare`
ALBERT = post_norm_encoder(
    "ALBERT", f"encoder.{BLOCKS}.{{i}}", "attention", ("attention.dense", output), "attention.LayerNorm",
    ("ffn", output), ("ffn_output", first_input), "ffn_output", "full_layer_layer_norm",
    lambda c: c.num_hidden_layers * c.inner_group_num)


class AlbertAdapter(BertAdapter):
    """BERT's weights layout (`query`, `key`, `value`; W_O `attention.dense`, each block's copy of the shared one)."""

    name = "ALBERT"
    model_types: ClassVar[tuple[str, ...]] = ("albert",)
    kind = "encoder"

    def prepare(self, model: nn.Module) -> None:
        encoder = model.base_model.encoder
        keep = {id(tensor): tensor for tensor in [*model.parameters(), *model.buffers()]} | {id(model.config):
                                                                                           model.config}
        blocks = [copy.deepcopy(layer, memo=dict(keep)) for group in _groups_in_order(encoder, model.config)
                  for layer in group.albert_layers]  # pyright: ignore[reportGeneralTypeIssues] torch's __getattr__
        encoder.add_module(BLOCKS, nn.ModuleList(blocks))
        route(encoder, _encoder_forward)

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return ALBERT

    def notes(self, config: Any) -> dict[str, str]:
        blocks, kept = config.num_hidden_layers * config.inner_group_num, config.num_hidden_groups * \
            config.inner_group_num  # blocks applied, and layers whose weights it keeps
        shared = "one layer's weights, applied by every one of its" if kept == 1 else \
            f"{kept} layers' weights, applied in turn by its"
        return {"shared layers": f"{shared} {blocks} blocks (ALBERT shares its layers' weights)",
                "factorised embedding": f"tokens are embedded in {config.embedding_size} dimensions, then mapped to "
                                        f"the blocks' {config.hidden_size}"}


def _groups_in_order(encoder: nn.Module, config: Any) -> list[nn.Module]:
    """The layer group each of the N blocks applies, as transformers picks it: group int(i / (N / groups))."""
    n, groups = config.num_hidden_layers, config.num_hidden_groups
    return [encoder.albert_layer_groups[int(i / (n / groups))]  # pyright: ignore[reportReturnType] torch's __getattr__
            for i in range(n)]


def _encoder_forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     **kwargs: Any) -> Any:
    """AlbertTransformer's forward, each block's own module in turn (the shared weights)."""
    from transformers.modeling_outputs import BaseModelOutput

    hidden_states = self.embedding_hidden_mapping_in(hidden_states)  # (batch, len, E) -> (batch, len, H)
    for block in getattr(self, BLOCKS):
        hidden_states = block(hidden_states, attention_mask, **kwargs)
    return BaseModelOutput(last_hidden_state=hidden_states)
