"""Which parts of a block are norms, of which kind, and how a decoder's norms are placed, in words."""

from __future__ import annotations

from torch import nn

from attention_atlas.model.hf.taps import LAYER_NORM, RMS_NORM, NormValue, TapTable, output


def is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower() and not isinstance(module, nn.Identity)


def norm_value(module: nn.Module) -> NormValue:
    return RMS_NORM if "rms" in type(module).__name__.lower() else LAYER_NORM


def norm_kind(block: nn.Module) -> str:
    """"RMSNorm" where every norm of the block is one, else "LayerNorm"."""
    norms = [m for m in block.children() if is_norm(m)]
    return "RMSNorm" if norms and all(norm_value(m).rms for m in norms) else "LayerNorm"


def is_parallel(table: TapTable) -> bool:
    """A block whose MLP reads the block's input, not attention's sum (GPT-NeoX, GPT-J, Phi, Cohere)."""
    return "hook_mlp_out" in table and "hook_resid_mid" not in table


def norm_layout(table: TapTable, parallel: bool, kind: str) -> str:
    """How the block's norms are placed, in words."""
    if parallel:
        return f"pre-norm, attention and MLP in parallel ({kind})"
    if "hook_attn_out" not in table and "ln1.hook_scale" not in table:  # no norm before attention, and the block's
        # output is not its input plus what its sublayers write: each norm reads a residual sum (OPT-350m)
        return f"post-norm: a norm after each residual sum, as in the original Transformer and BERT ({kind})"
    sandwich = "hook_attn_out" in table and table["hook_attn_out"][1] is output  # a norm's output is what attention
    # adds
    if sandwich and "ln1.hook_scale" in table:
        return f"pre- and post-norm around each sublayer ({kind})"
    if sandwich:  # not "post-norm": the stream itself is never normalised, as in BERT's (OLMo 2)
        return f"a norm on each sublayer's output, none before ({kind})"
    return f"pre-norm ({kind})"
