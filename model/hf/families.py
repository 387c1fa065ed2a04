"""Which family a Hugging Face model belongs to: a table where one describes its type (model/hf/taps.py), else
the layout its probe pass finds (model/hf/discovery.py: decoders of any type, and encoders of their layout)."""

from __future__ import annotations

from typing import Any

from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.discovery import discover
from attention_atlas.model.hf.taps import TABLES, Family

Kind = str  # "encoder", "decoder" or "encoder-decoder"


def kind_of(model_type: str) -> Kind:
    """What kind of model a type is, as this app opens it; ValueError for a type it cannot open, saying why."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if model_type in TABLES:
        return TABLES[model_type](CONFIG_MAPPING[model_type]()).kind
    if model_type not in CONFIG_MAPPING:
        raise UserError(f"model type {model_type!r} is not one the installed transformers knows; the app opens "
                         "the text models it knows (see docs/models.md).")
    if not getattr(CONFIG_MAPPING[model_type](), "is_encoder_decoder", False):
        if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:  # an encoder (ModernBERT), or a BERT-style one
            return "encoder"
        if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            return "decoder"
    raise UserError(f"model type {model_type!r} is not supported: the app opens decoder-only language models "
                     "of any type, and the encoders and encoder-decoders listed in docs/models.md.")


def family_of(model: nn.Module, config: Any, kind: Kind) -> Family:
    """The family of a loaded model of `kind` (`kind_of` its type; ValueError where its layers cannot be read)."""
    table = TABLES.get(config.model_type)
    return table(config) if table is not None else discover(model, kind)


def description(facts: Any, family: Family) -> dict[str, str]:
    """A model type as docs/models.md lists it, from a loaded model's facts and family."""
    attention = ["grouped-query" if facts.n_kv_heads < facts.n_heads else "multi-head"]
    attention += ["sliding window" if any(facts.windows) and not all(facts.windows) else
                  "sliding window, every layer" if facts.windows else ""]
    attention += ["soft-capped scores" if "soft-capping" in facts.notes else ""]
    positions = facts.positional + (f" ({facts.notes['rotary dimensions'].split(' ')[0]} of each head)"
                                    if "rotary dimensions" in facts.notes else "")
    return {"kind": facts.kind, "positions": positions, "attention": ", ".join(a for a in attention if a),
            "norms": facts.norm, "hooks not found": ", ".join(f"`{h}`" for h in family.unplaced) or "—"}
