"""The families of Hugging Face models, one module each (model/hf/families/<family>.py, an `Adapter`): which adapter
a model type has (`adapter_of`; the default, `Adapter`, finds the hooks of any other type by a probe pass), which
kinds of type open (`kind_of`), a loaded model's hooks (`family_of`), and its row of docs/models.md."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families.adapter import Adapter
from attention_atlas.model.hf.taps import Family

Kind = str  # "encoder", "decoder" or "encoder-decoder"
DISCOVERED = Adapter()  # every type no family module lists
NO_ATTENTION = ("mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm")  # state-space and recurrent language models


def _family_adapters() -> tuple[Adapter, ...]:
    """The adapter each family module of this package defines (its one `Adapter` subclass), so that a new family is
    one new module."""
    found = []
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        found += [value() for value in vars(module).values() if isinstance(value, type) and issubclass(value, Adapter)
                  and value.__module__ == module.__name__ and value is not Adapter]
    return tuple(found)


ADAPTERS = _family_adapters()
_BY_TYPE = {model_type: adapter for adapter in ADAPTERS for model_type in adapter.model_types}


def adapter_of(model_type: str) -> Adapter:
    """The adapter of a model type: its family module's, else the default (discovery, the common layout)."""
    return _BY_TYPE.get(model_type, DISCOVERED)


def kind_of(model_type: str) -> Kind:
    """What kind of model a type is, as this app opens it; ValueError for a type it cannot open, saying why."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    known = adapter_of(model_type).kind
    if known is not None:
        return known
    if model_type in NO_ATTENTION:
        raise UserError(f"{model_type} has no attention layers: nothing for this app to show.")
    if model_type not in CONFIG_MAPPING:
        raise UserError(f"model type {model_type!r} is not one the installed transformers knows; the app opens "
                         "the text models it knows (see docs/models.md).")
    if not getattr(CONFIG_MAPPING[model_type](), "is_encoder_decoder", False):
        if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:  # an encoder of a layout discovery reads
            return "encoder"
        if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            return "decoder"
    raise UserError(f"model type {model_type!r} is not supported: the app opens decoder-only language models "
                     "of any type, and the encoders and encoder-decoders listed in docs/models.md.")


def family_of(model: nn.Module, config: Any, kind: Kind) -> Family:
    """The hooks of a loaded model of `kind` (`kind_of` its type; ValueError where its layers cannot be read)."""
    return adapter_of(config.model_type).family(model, config, kind)


def description(facts: Any, family: Family, sinks: bool = False) -> dict[str, str]:
    """A model type as docs/models.md lists it, from a loaded model's facts and family; `sinks`: a run found learned
    sink logits in its attention (GPT-OSS), which the facts do not hold."""
    notes = facts.notes
    attention = ["grouped-query" if facts.n_kv_heads < facts.n_heads else "multi-head"]
    attention[0] += " latent (MLA)" if "multi-head latent attention" in notes else ""
    attention += ["sliding window" if any(facts.windows) and not all(facts.windows) else
                  "sliding window, every layer" if facts.windows else ""]
    attention += ["soft-capped scores" if "soft-capping" in notes else "", "learned sinks" if sinks else ""]
    attention += ["chunked" if "chunked attention" in notes else "",
                  "NoPE layers" if "no positional encoding (NoPE)" in notes else ""]
    attention += [f"layer map: {notes['layer map']}" if "layer map" in notes else ""]
    positions = facts.positional + (f" ({facts.notes['rotary dimensions'].split(' ')[0]} of each head)"
                                    if "rotary dimensions" in facts.notes else "")
    return {"kind": facts.kind, "positions": positions, "attention": ", ".join(a for a in attention if a),
            "norms": facts.norm, "hooks not found": ", ".join(f"`{h}`" for h in family.unplaced) or "—"}
