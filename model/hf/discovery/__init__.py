"""Where the hooks are in a Hugging Face model that no family table describes, found by running it (decoder-only
models of any type, and encoders of their layout, as ModernBERT).

Most current families (Llama, Mistral, Qwen, Gemma, Phi, OLMo, GPT-NeoX, OPT, GPT-2 ...) keep their blocks in one
`nn.ModuleList` and compute attention through transformers' attention interface, but name and wire their blocks'
parts differently: a norm called `post_attention_layernorm` is the norm before the MLP in Llama and the norm of
attention's output in Gemma 2 and OLMo 2; GPT-NeoX and Phi run attention and the MLP side by side. Names cannot
tell these apart; values can. `discover` runs the model once on a few tokens, records what each block's parts
received and returned, and places a hook only where the values show its meaning:

- ln1: the norm whose input is the block's input and whose output is attention's input (of two alike, the nearest),
  or that scaled (Falcon-H1's attention_in_multiplier);
- hook_attn_out: attention's output, or that of the norm applied to it (sandwich norms);
- ln2: the norm whose output is the MLP's input; the block is parallel when that norm reads the block's input;
- hook_resid_mid: what ln2 (or, without one, the MLP) reads after attention's sum (sequential blocks only);
- hook_mlp_out: the MLP's output, or that of the norm applied to it; hook_resid_post: the block's output; the
  residual hooks are kept only where the probe's values add up as their names say (resid_mid = resid_pre + attn_out,
  resid_post = resid_mid + mlp_out, or resid_pre + attn_out + mlp_out in parallel blocks), so a block that adds a
  scaled output or normalises the sum (a BERT-style layout no table describes) offers no hook that means another
  thing (its output, normalised, is still the next block's hook_resid_pre);
- inside the MLP: mlp.hook_post is what its last projection reads, mlp.hook_pre what its activation reads, and
  mlp.hook_pre_linear the other projection of a gated MLP (the up projection); in a mixture of experts,
  mlp.hook_expert_weights and hook_expert_indices from its router (a part with a score per expert that returns the
  experts it chose);
- inside attention: the per-head values its attention function reports (model/hf/heads.py); where the queries
  it reports are not its `q_proj`'s output (rotated, or normalised), hook_q/hook_k are the projections' outputs
  and hook_rot_q/hook_rot_k what attention read; a fused projection is split in the layout that gives back, at
  position 0 (which no rotation moves), what attention read; each layer's sliding window is what its attention
  function received;
- per stack: hook_embed (the token embeddings, x the model's scale where it scales them), hook_pos_embed (a learned
  position table), ln_final and hook_resid_final (the norm read after the last block).

Hybrids (Qwen3-Next and Qwen3.5, Jamba, Granite 4, Nemotron-H, LFM2) put softmax attention in some blocks only, the
others mixing tokens by Mamba, a gated delta-net or a short convolution, which report nothing: the app's layers are
then the softmax attention blocks alone, numbered 0 .. n - 1 as transformers' `attentions` output numbers them, and
each layer's hooks (its residual stream's too: hook_resid_pre is that block's input) are placed in its true block
(`Family.blocks`; ModelFacts.attention_blocks, `layer_words`: "layer 3 (attention layer 0)"). Every block, attention
or not, offers the stream going in and out (`decoder.blocks.{b}.hook_resid_pre`, `hook_resid_post`: the residual
views read the stream at every block); the model card's layer map names what each block is (model/hf/facts.py). So
does a decoder whose every block attends beside another mixer (Falcon-H1: attention and Mamba side by side, each
output scaled, so no sum inside its blocks is placed), and a pre-norm decoder whose blocks offer no hook_resid_post
(a dense Granite's blocks add their parts scaled by residual_multiplier, so none of their sums is placed): its layer
i is block i, and its stream is read block by block (a post-norm block's output is normalised, not the stream before
any norm: OPT-350m's is not read so).

A hook must be placed alike in every block (of attention), or it is not placed; the hooks a decoder has that could
not be placed are listed (`Family.unplaced`), and the model card says so. A model whose attention reports nothing
(it computes attention in its own code: BLOOM, for one) cannot be shown, and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.discovery.block import block_table
from attention_atlas.model.hf.discovery.mixers import mixer_words
from attention_atlas.model.hf.discovery.norms import is_parallel, norm_kind, norm_layout
from attention_atlas.model.hf.discovery.stack import block_list, stack_table
from attention_atlas.model.hf.discovery.values import rounding
from attention_atlas.model.hf.probe import Probe, probe_run
from attention_atlas.model.hf.taps import Family, TapTable

LAYER_ORDER = (  # what a decoder block may offer, in the order of its computation
    "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v",
    "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z",
    "hook_attn_out", "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre",
    "mlp.hook_pre_linear", "mlp.hook_post", "mlp.hook_expert_weights", "mlp.hook_expert_indices", "hook_mlp_out",
    "hook_resid_post",
)
STACK_ORDER = ("hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized", "hook_resid_final")


def discover(model: nn.Module, kind: str = "decoder") -> Family:
    """The Family of a decoder-only model (or, `kind` "encoder", an encoder of the same layout: ModernBERT), its hooks
    found by a probe pass (see the module's docstring). ValueError where no block list is found, or attention reports
    nothing."""
    stack = "encoder" if kind == "encoder" else "decoder"
    base = model.base_model
    layers_path, layers = block_list(model)
    probe = probe_run(model, base, layers, kind)
    rotary = _has_rotary(base)
    with rounding(model):
        tables = [block_table(block, probe, rotary) for block in layers]
        found = stack_table(model, layers, probe)
    blocks = attention_blocks(tables)
    if not blocks:
        raise UserError(f"{type(model).__name__} computes attention in its own code, not through transformers' "
                         "attention interface, so its attention cannot be read here yet.")
    tables = [tables[i] for i in blocks]  # a hybrid's softmax attention layers: the app's layers 0 .. n - 1
    first = tables[0]
    layer_taps = {name: (f"{layers_path}.{{i}}{'.' + first[name][0] if first[name][0] else ''}", first[name][1])
                  for name in LAYER_ORDER if name in first and all(t.get(name) == first[name] for t in tables)}
    stack_taps = {name: found[name] for name in STACK_ORDER if name in found}
    rotary = rotary or "attn.hook_rot_q" in layer_taps
    parallel = is_parallel(first)
    unplaced = tuple(name for name in LAYER_ORDER if name not in layer_taps and _expected(name, rotary, parallel)) + \
        tuple(name for name in STACK_ORDER if name not in stack_taps and name != "hook_pos_embed")
    windows = tuple(_window(layers[i], probe) for i in blocks)
    norm = norm_layout(first, parallel, norm_kind(layers[0]))
    scaled = "hook_resid_post" not in layer_taps and not norm.startswith("post")  # blocks whose output is the stream
    # before any norm, but no sum inside them (a post-norm block's output is normalised: OPT-350m's)
    streamed = stack == "decoder" and (len(blocks) < len(layers) or any(map(mixer_words, layers)) or scaled)
    return Family(
        name=type(base).__name__.removesuffix("Model"),
        kind=kind,
        positional="rotary" if rotary else "learned absolute" if "hook_pos_embed" in stack_taps else "none found",
        norm=norm,
        stack_taps={stack: stack_taps},
        layer_taps={stack: layer_taps},
        layer_counts={stack: _count(len(blocks))},
        final_norm=stack_taps["ln_final.hook_scale"][0] if "ln_final.hook_scale" in stack_taps else None,
        unplaced=unplaced,
        windows=windows if any(windows) else (),
        blocks=blocks if len(blocks) < len(layers) else (),
        block_list=layers_path if streamed else "",
        n_blocks=len(layers) if streamed else 0,
    )


def attention_blocks(tables: list[TapTable]) -> tuple[int, ...]:
    """The numbers of the blocks whose attention reports (every block, but in a hybrid only those of softmax
    attention: its state-space, linear-attention or convolution layers report nothing)."""
    return tuple(i for i, table in enumerate(tables) if any(name.startswith("attn.") for name in table))


def _window(block: nn.Module, probe: Probe) -> int:
    """The sliding window the block's attention read (0: none), as its attention function received it."""
    return next((probe.windows[m] for m in block.modules() if m in probe.windows), 0)


def _count(n: int) -> Callable[[Any], int]:
    """A family's layer count: the blocks found, whatever the config says."""
    return lambda config: n


def _expected(name: str, rotary: bool, parallel: bool) -> bool:
    """Whether a decoder block of this kind has the hook `name` (a gated MLP's up projection is not expected)."""
    return not ((name.startswith("attn.hook_rot_") and not rotary) or (name == "hook_resid_mid" and parallel)
                or name in ("mlp.hook_pre_linear", "mlp.hook_expert_weights", "mlp.hook_expert_indices"))


def _has_rotary(base: nn.Module) -> bool:
    """Whether the model rotates queries and keys: a rotary embedding among its modules."""
    return any("rotary" in type(m).__name__.lower() for m in base.modules())
