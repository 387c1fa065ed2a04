"""BART and its kind: encoder-decoders with `q_proj`/`k_proj`/`v_proj`/`out_proj` attention, post-norm (BART,
Marian: each norm reads the sum) or pre-norm (mBART, Pegasus: each norm reads the stream before its sublayer, and
each stack ends with a norm of its own), learned (BART, mBART) or sinusoidal (Marian, Pegasus) positions; their
configs give each stack its own heads and MLP width (`encoder_attention_heads`, `decoder_ffn_dim` ...)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from torch import nn

from attention_atlas.model.hf.families.adapter import Adapter, Sizes, config_int
from attention_atlas.model.hf.taps import (
    LAYER_NORM,
    Family,
    TapTable,
    attention_hooks,
    batched_output,
    first_input,
    first_output,
    norm_hooks,
    output,
)

STACKS = ("encoder", "decoder")


def _layer(stack: str, pre_norm: bool) -> TapTable:
    layer = f"{stack}.layers.{{i}}"
    norms = (f"{layer}.self_attn_layer_norm", f"{layer}.encoder_attn_layer_norm", f"{layer}.final_layer_norm")
    after_self, after_cross = (norms[1] if stack == "decoder" else norms[2]), norms[2]  # read the sums in pre-norm
    table: TapTable = {
        "hook_resid_pre": (layer, first_input),
        **norm_hooks("ln1", norms[0], LAYER_NORM),
        **attention_hooks("attn", f"{layer}.self_attn"),
        "hook_attn_out": (f"{layer}.self_attn", first_output),
        "hook_resid_mid": (after_self if pre_norm else norms[0], first_input),  # the sum, before the next norm
    }
    if stack == "decoder":
        table |= {
            **norm_hooks("ln_cross", norms[1], LAYER_NORM),
            **attention_hooks("cross_attn", f"{layer}.encoder_attn"),
            "hook_cross_attn_out": (f"{layer}.encoder_attn", first_output),
            "hook_resid_mid_cross": (after_cross if pre_norm else norms[1], first_input),
        }
    return table | {
        **norm_hooks("ln2", norms[2], LAYER_NORM),
        "mlp.hook_pre": (f"{layer}.fc1", output),
        "mlp.hook_post": (f"{layer}.activation_fn", output),
        "hook_mlp_out": (f"{layer}.fc2", output),
        "hook_resid_post": (layer if pre_norm else norms[2], first_output if pre_norm else first_input),
        **({} if pre_norm else {"hook_normalized_resid_post": (layer, first_output)}),
    }


def _bart(pre_norm: bool, positional: str, name: str) -> Family:
    final = {stack: {**norm_hooks("ln_final", f"{stack}.layer_norm", LAYER_NORM),
                     "hook_resid_final": (f"{stack}.layer_norm", output)} if pre_norm else {}
             for stack in STACKS}
    return Family(
        name=name,
        kind="encoder-decoder",
        positional=positional,
        norm="pre-norm" if pre_norm else "post-norm",
        stack_taps={stack: {
            "hook_embed": (f"{stack}.embed_tokens", output),
            "hook_pos_embed": (f"{stack}.embed_positions", batched_output),
            **final[stack],
        } for stack in STACKS},
        layer_taps={stack: _layer(stack, pre_norm) for stack in STACKS},
        layer_counts={"encoder": lambda c: c.encoder_layers, "decoder": lambda c: c.decoder_layers},
        final_norm="decoder.layer_norm" if pre_norm else None,
    )


FAMILIES = {  # model type -> its family
    "bart": _bart(False, "learned absolute", "BART"),
    "marian": _bart(False, "sinusoidal absolute", "Marian"),
    "mbart": _bart(True, "learned absolute", "mBART"),
    "pegasus": _bart(True, "sinusoidal absolute", "Pegasus"),
}


class BartAdapter(Adapter):
    name = "BART"
    model_types: ClassVar[tuple[str, ...]] = tuple(FAMILIES)
    kind = "encoder-decoder"

    def family(self, model: nn.Module, config: Any, kind: str) -> Family:
        return FAMILIES[config.model_type]

    def sizes(self, config: Any, stack: str) -> Sizes:
        generic = super().sizes(config, stack)
        heads = config_int(config, f"{stack}_attention_heads", default=generic.n_heads)
        return replace(generic, n_heads=heads, n_kv_heads=heads, d_head=generic.d_model // heads,
                       d_ff=config_int(config, f"{stack}_ffn_dim", default=4 * generic.d_model))
