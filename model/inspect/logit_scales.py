"""What a model multiplies its unembedding's input and its logits by, beyond its final norm and lm_head, as its own
forward pass in transformers does: on the way in, T5's d_model^-1/2 (tied embeddings) and MiniCPM3's
1/logits_scaling; on the way out, Granite's 1/logits_scaling (every Granite family, Granite 4's hybrid too),
Falcon-H1's lm_head_multiplier, Cohere's logit_scale and HyperCLOVAX's logits_scaling (a multiplier there, a divisor
in Granite: the same name, read per model type)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig

GRANITE = ("granite", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoeshared", "granitemoehybrid")
COHERE = ("cohere", "cohere2", "cohere2_moe", "cohere_compass")


def head_scales(config: PretrainedConfig) -> tuple[float, float]:
    """(what lm_head's input is multiplied by, what its logits are multiplied by) in a model of `config`."""
    kind = config.model_type
    into = config.d_model ** -0.5 if getattr(config, "scale_decoder_outputs", False) else 1.0
    if kind == "minicpm3":
        into = 1 / config.logits_scaling
    out = 1.0
    if kind in GRANITE:
        out = 1 / config.logits_scaling
    elif kind == "falcon_h1":
        out = config.lm_head_multiplier
    elif kind in COHERE and config.logit_scale is not None:
        out = config.logit_scale
    elif kind == "hyperclovax":
        out = config.logits_scaling
    return float(into), float(out)
