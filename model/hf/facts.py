"""What a person should know about a Hugging Face model, read from its config: the model card's facts."""

from __future__ import annotations

from typing import Any

from torch import nn

from model.core.devices import precision_name
from model.core.trace import ModelFacts
from model.hf.taps import Family

MAX_TOKENS = 2048  # longest input traced, whatever the model allows (memory grows with its square)


def _config_value(config: Any, *names: str, default: int = 0) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def model_facts(model_id: str, model: nn.Module, family: Family, notes: dict[str, Any]) -> ModelFacts:
    c = model.config
    n_heads = _config_value(c, "num_attention_heads", "n_head", "encoder_attention_heads", "num_heads")
    n_kv = _config_value(c, "num_key_value_heads", default=n_heads)
    d_model = _config_value(c, "hidden_size", "n_embd", "d_model")
    limit = _config_value(c, "max_position_embeddings", "n_positions", default=MAX_TOKENS)
    layers = {stack: count(c) for stack, count in family.layer_counts.items()}
    if n_kv != n_heads:
        notes = {**notes, "grouped-query attention": f"query head h reads key/value head h // {n_heads // n_kv}"}
    return ModelFacts(
        model_id=model_id,
        family=f"{family.name} ({c.model_type}, Hugging Face)",
        kind=family.kind,
        n_encoder_layers=layers.get("encoder", 0),
        n_decoder_layers=layers.get("decoder", 0),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_model=d_model,
        d_ff=_config_value(c, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim", default=4 * d_model),
        vocab_size=c.vocab_size,
        max_len=min(limit, MAX_TOKENS),
        positional=family.positional,
        norm=family.norm,
        n_params=sum(p.numel() for p in model.parameters()),
        device=str(model.device),
        notes=notes,
        precision=precision_name(model.dtype),
    )
