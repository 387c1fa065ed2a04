"""What a person should know about a Hugging Face model, read from its config: the model card's facts, and the
longest text a run may read (`longest_input`)."""

from __future__ import annotations

import bisect
from typing import Any

from torch import nn

from attention_atlas.model.core.capture.host_copies import SIXTEEN_BITS
from attention_atlas.model.core.devices import precision_name
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.hf.chunks import chunk_words, layer_chunks
from attention_atlas.model.hf.discovery.mixers import mixer_words
from attention_atlas.model.hf.discovery.stack import block_list
from attention_atlas.model.hf.families import adapter_of
from attention_atlas.model.hf.nope import nope_words, qk_norm_words
from attention_atlas.model.hf.placement import device_words
from attention_atlas.model.hf.taps import Family

LONGEST_INPUT = 32768  # tokens at most, whatever the model allows (T5 has no position limit of its own)
SOURCE_BYTES_LIMIT = 1 << 30  # 1 GiB: the most a run may keep to compute its attention patterns from


def source_bytes(config: Any, family: Family, length: int, number_bytes: int = 4, whole_masks: bool = True) -> int:
    """Bytes a run of `length` tokens keeps to compute every attention pattern from (model/core/attention/source.py
    PatternSource), a source and a target of `length` tokens each for an encoder-decoder (an upper bound; with
    `whole_masks` False, each mask counted as a run without padding or hidden pairs keeps it).

    Per attention site (encoder self, decoder self, decoder cross) and layer, `number_bytes` a number (4: float32;
    2: a model running in bfloat16 or float16, whose queries and keys are kept in it):
      query (heads, L, d_head) and key (kv_heads, L, d_head): O(L x d), the part that grows with the model;
    per site, shared by its layers:
      the mask (L, L) bool at most (a mask without padding or hidden pairs is kept as its 2L - 1 diagonals:
      model/core/trace/kept_masks.py; `whole_masks` False counts those), and in T5 the position bias (heads, L, L)
      float32 (cross-attention's is zeros): O(L²); in DeBERTa each layer's own position bias.
    """
    per_token = per_pair = 0  # bytes that grow with L, and with L²
    for stack, count in family.layer_counts.items():
        sizes = adapter_of(config.model_type).sizes(config, stack)  # kv heads: fewer in grouped-query attention
        sites = 2 if stack == "decoder" and family.kind == "encoder-decoder" else 1  # self, and cross
        per_token += sites * count(config) * (sizes.n_heads + sizes.n_kv_heads) * sizes.d_head * number_bytes
        biases = (count(config) if family.bias_per_layer else 1) if family.position_bias else 0
        per_pair += sites * (whole_masks + sizes.n_heads * 4 * biases)
        per_token += sites * 2 * (not whole_masks)  # (the 2L - 1 diagonals: 2L, a bound)
    return length * per_token + length**2 * per_pair


def longest_input(config: Any, family: Family, byte_limit: int = SOURCE_BYTES_LIMIT, number_bytes: int = 4) -> int:
    """The most tokens a run reads: the model's own position limit (none, as in T5: LONGEST_INPUT), at most
    LONGEST_INPUT, and only as many as keep `source_bytes` (`number_bytes` a number, each mask as a run without padding
    keeps it: its diagonals) within `byte_limit`. SmolLM2: 8,192 tokens (784 MiB); MiniLM: its own 512; a tiny T5
    (tests/tiny_hf.py): 4,713, where its three (4, L, L) biases fill the limit; 4 layers of SmolLM2's shape with
    32,768 positions: all of them (384 MiB; a run past 256 MiB of float32 queries and keys keeps them in 16 bits,
    model/core/capture/host_copies.py)."""
    ceiling = min(adapter_of(config.model_type).position_limit(config) or LONGEST_INPUT, LONGEST_INPUT)
    lengths = range(1, ceiling + 1)  # source_bytes grows with the length: the last that fits, by bisection
    fitting = bisect.bisect_right(lengths, byte_limit,
                                  key=lambda length: source_bytes(config, family, length, number_bytes, False))
    return max(1, fitting)


def rotated_fraction(config: Any) -> float:
    """The part of each head's dimensions a rotary model rotates (partial rotary: Phi, GPT-NeoX, GPT-J)."""
    parameters = getattr(config, "rope_parameters", None) or {}
    if "partial_rotary_factor" in parameters:
        return float(parameters["partial_rotary_factor"])
    if getattr(config, "rotary_dim", None):  # GPT-J: a number of dimensions
        return config.rotary_dim / (config.hidden_size // config.num_attention_heads)
    return float(getattr(config, "partial_rotary_factor", None) or 1.0)


def window_words(windows: list[int] | tuple[int, ...], causal: bool) -> str:
    """What a model's sliding windows let a token see, in words: "layers 0, 2: each token sees itself and the 3
    tokens before it; the other layers see every token" (a causal model's), or "... and the 3 on either side"."""
    sliding = [str(i) for i, w in enumerate(windows) if w]
    layers = "every layer" if all(windows) else f"layer{'s' if len(sliding) > 1 else ''} {', '.join(sliding)}"
    rest = "" if all(windows) else "; the other layers see every token"
    return (f"{layers}: each token sees itself and the {max(windows) - 1} tokens "
            f"{'before it' if causal else 'on either side'}{rest}")


def block_words(model: nn.Module, family: Family) -> dict[int, str]:
    """What mixes the tokens in each block of a decoder, by its true layer number ("softmax attention", "Mamba (state
    space)", "softmax attention + Mamba (state space)" …); {} for another kind of model."""
    if family.kind != "decoder":
        return {}
    layers = block_list(model)[1]
    attending = set(family.blocks or range(len(layers)))
    found = {}
    for number, block in enumerate(layers):
        other = mixer_words(block)
        found[number] = " + ".join(w for w in ("softmax attention" if number in attending else "", other) if w) \
            or "no token mixing (an MLP only)"
    return found


def layer_map_words(blocks: dict[int, str], attention: tuple[int, ...]) -> str:
    """The model card's layer map: "layers 0, 2: Mamba (state space); layers 1, 3: softmax attention (shown as
    attention layers 0–1, of 4 layers)" (the kinds in the order of their first layer)."""
    kinds: dict[str, list[int]] = {}
    for number, words in blocks.items():
        kinds.setdefault(words, []).append(number)
    shown = f" (shown as attention layer{f's 0–{len(attention) - 1}' if len(attention) > 1 else ' 0'}, of " \
        f"{len(blocks)} layers)"
    return "; ".join(f"layer{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}: {words}"
                     f"{shown if attention and words == 'softmax attention' else ''}"
                     for words, numbers in kinds.items())


def scaled_input_words(config: Any) -> str:
    """What attention's input and its keys are multiplied by (Falcon-H1's attention_in_multiplier and key_multiplier),
    in words; "" where by nothing."""
    into, keys = (float(getattr(config, name, 1.0)) for name in ("attention_in_multiplier", "key_multiplier"))
    return "; ".join(words for scale, words in (
        (into, f"attention reads its norm's output × {into:g} (attention_in_multiplier)"),
        (keys, f"its keys are multiplied by {keys:g} after their projection (key_multiplier)")) if scale != 1.0)


def _layout_notes(config: Any, family: Family) -> dict[str, str]:
    """What the model card says of this layout beyond the facts' fields."""
    notes = {}
    if family.windows:
        notes["sliding-window attention"] = window_words(family.windows, family.kind != "encoder")
    if layer_chunks(config):
        notes["chunked attention"] = chunk_words(layer_chunks(config))
    for name, words in (("no positional encoding (NoPE)", nope_words(config)), ("qk-norm", qk_norm_words(config)),
                        ("scaled inputs", scaled_input_words(config))):
        if words:
            notes[name] = words
    partial = rotated_fraction(config)
    if family.positional == "rotary" and partial < 1:
        notes["rotary dimensions"] = f"{partial:.0%} of each head's dimensions are rotated, the rest are not"
    if getattr(config, "attn_logit_softcapping", None):
        notes["soft-capping"] = f"attention scores capped to c·tanh(score / c), c = {config.attn_logit_softcapping}"
    if family.unplaced:
        notes["hooks not found"] = ", ".join(family.unplaced)
    return notes


def model_facts(model_id: str, model: nn.Module, family: Family, notes: dict[str, Any]) -> ModelFacts:
    c = model.config
    sizes = adapter_of(c.model_type).sizes(c, "encoder" if family.kind != "decoder" else "decoder")
    n_heads, n_kv, d_model = sizes.n_heads, sizes.n_kv_heads, sizes.d_model
    layers = {stack: count(c) for stack, count in family.layer_counts.items()}
    notes = {**notes, **_layout_notes(c, family), **adapter_of(c.model_type).notes(c)}
    kinds = block_words(model, family)
    if any(words != "softmax attention" for words in kinds.values()):  # a hybrid, or Falcon-H1's attention beside
        notes["layer map"] = layer_map_words(kinds, family.blocks)  # Mamba: the card's layer map
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
        d_ff=sizes.d_ff,
        vocab_size=c.vocab_size,
        max_len=longest_input(c, family, number_bytes=2 if model.dtype in SIXTEEN_BITS else 4),
        positional=family.positional,
        norm=family.norm,
        n_params=sum(p.numel() for p in model.parameters()),
        device=device_words(model),
        notes=notes,
        precision=precision_name(model.dtype),
        windows=list(family.windows),
        chunks=layer_chunks(c),
        attention_blocks=list(family.blocks),
        block_kinds=[kinds[b] for b in sorted(kinds)] if family.n_blocks else [],  # as discovery's block hooks (a
        # dense Granite's: each "softmax attention")
    )
