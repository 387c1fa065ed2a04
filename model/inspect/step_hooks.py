"""Which hooks one layer's attention step-through reads, by name, for any model of the hook vocabulary.

The head reads X: the layer's input after the norm where the model normalises first (pre-norm: the output of
the norm whose `ln1.hook_normalized` is named, or `ln_cross.hook_normalized` for cross-attention), or the residual
stream itself where it normalises after the sum (post-norm: `hook_resid_pre`; the decoder's cross-attention reads
the self-attention block's normalised output, ln1's). A norm's output is its `hook_normalized` x weight + bias
(model/inspect/norm_output.py). Cross-attention's keys and values read the encoder's output. After the heads: W_O
gives `hook_attn_out` (or the norm of attention's output does, in models that normalise it: Gemma 2, OLMo 2), the
residual add gives `hook_resid_mid` (none where attention and the MLP run in parallel; `hook_resid_post` where
attention is the block's only part, as in Nemotron-H), and the norm that follows is named by its `hook_normalized`.
Given the hooks the model offers, the names follow what its block has: a block that adds attention's output scaled or
beside another part's (Granite 4, Falcon-H1) offers no hook_attn_out, and the steps after W_O are then said, not
drawn (`StepNames.unshown`). `step_checks` pairs each recomputed step with the hook that holds the model's own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import numpy as np

from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.head_math import HeadSteps, output_projection
from attention_atlas.model.inspect.head_weights import HeadWeights

ALL_LAYERS_UP_TO = 64 * 2**20  # bytes: see hooks_to_capture

PARALLEL = ("Attention and the MLP run side by side in this model: both read the layer's input, and both outputs "
            "are added to it at once (hook_resid_post), so there is no sum after attention alone.")
ATTENTION_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_attn_scores", "hook_pattern",
                   "hook_z")


@dataclass(frozen=True)
class StepNames:
    """Hook names of one layer's attention block."""

    attention: str  # prefix of the per-head hooks: "decoder.1.cross_attn"
    x: str  # (q_len, d_model) what the queries read (a norm's hook_normalized: that norm's output)
    memory: tuple[str, ...]  # cross-attention: what keys and values read, the first one captured; else ()
    before: str  # (q_len, d_model) the residual stream the block's output is added to
    out: str | None  # (q_len, d_model) what the block adds to the stream: W_O's output, or a norm's of it
    # (`projected`); None where the model offers no hook of it
    after: str | None  # (q_len, d_model) the residual sum; None where attention and the MLP run in parallel, or the
    # model offers no hook of it
    norm: str | None  # (q_len, d_model) the hook_normalized of the norm that follows the sum, if any
    norm_label: str  # how a person names that norm
    projected: bool = True  # `out` is W_O's output (False: the model normalises it before the sum, as Gemma 2)
    unshown: str = ""  # where `after` is None: why no sum is shown (side by side, or no hook of it or of `out`)

    def hooks(self) -> tuple[str, ...]:
        """Everything to capture, and nothing else of the model."""
        return (*(f"{self.attention}.{h}" for h in ATTENTION_HOOKS), self.x, *self.memory, self.before,
                *(name for name in (self.out, self.after, self.norm) if name is not None))


def step_names(facts: ModelFacts, site: str, layer: int, offered: Collection[str] | None = None) -> StepNames:
    """The hook names of `site` ("encoder.attn", "decoder.cross_attn") at `layer` for a model with `facts`, whose
    norm placement (`facts.norm`, model/hf/discovery.py) says where the block reads and writes; `offered`: the hook
    names the model offers (model/inspect/offered.py), None for every name its layout has."""
    where = Site.of(site)
    prefix = f"{where.stack}.{layer}"
    pre_norm = facts.norm.startswith("pre")
    parallel = "parallel" in facts.norm  # attention and the MLP read the same input: no sum between them
    normed_out = "sublayer" in facts.norm  # a norm of attention's output is what the stream adds (Gemma 2, OLMo 2)
    last_encoder = facts.n_encoder_layers - 1
    memory = ("encoder.hook_resid_final", f"encoder.{last_encoder}.hook_normalized_resid_post") \
        if where.is_cross else ()
    if where.is_cross:
        x = f"{prefix}.ln_cross.hook_normalized" if pre_norm else f"{prefix}.ln1.hook_normalized"
        before, out, after = (f"{prefix}.hook_resid_mid" if pre_norm else x, f"{prefix}.hook_cross_attn_out",
                              f"{prefix}.hook_resid_mid_cross")
        norm: str | None = "ln2" if pre_norm else "ln_cross"
    else:
        x = f"{prefix}.ln1.hook_normalized" if pre_norm else f"{prefix}.hook_resid_pre"
        before, out = f"{prefix}.hook_resid_pre", f"{prefix}.hook_attn_out"
        after = None if parallel else f"{prefix}.hook_resid_mid"
        has_cross = where.stack == "decoder" and facts.kind == "encoder-decoder"
        norm = ("ln_cross" if has_cross else "ln2") if pre_norm else None if normed_out else "ln1"
        norm = None if parallel else norm
    label = {"ln1": "the norm after the sum (ln1)", "ln2": "the MLP block's norm (ln2)",
             "ln_cross": "the cross-attention block's norm (ln_cross)" if pre_norm else "the norm after the sum "
                         "(ln_cross)", None: ""}[norm]
    names = StepNames(f"{prefix}.{where.kind}", x, memory, before, out, after,
                      None if norm is None else f"{prefix}.{norm}.hook_normalized", label, not normed_out,
                      PARALLEL if after is None else "")
    return names if offered is None or where.is_cross else _offered_names(names, prefix, offered)


def _offered_names(names: StepNames, prefix: str, offered: Collection[str]) -> StepNames:
    """`names` of a self-attention block as far as the model offers them: the sum after attention is hook_resid_post
    where attention is the block's only part that writes (no hook_mlp_out: Nemotron-H's blocks of attention alone);
    a block whose output or sum has no hook (it adds attention's output scaled or beside another part's, so discovery
    places none: Granite 4, Falcon-H1) says so in `unshown`."""
    out = names.out if names.out in offered else None
    after, alone = names.after, f"{prefix}.hook_mlp_out" not in offered
    if after is not None and after not in offered:
        after = f"{prefix}.hook_resid_post" if alone and f"{prefix}.hook_resid_post" in offered else None
    norm = names.norm if names.norm in offered else None
    unshown = names.unshown
    if out is None:
        unshown = ("This model's blocks offer no hook_attn_out (the model card lists the hooks not found: a block "
                   "that adds attention's output scaled, or together with another part's, has none that means it), "
                   "so what W_O makes cannot be checked against the model's own numbers, nor the residual sum after "
                   "it: Step through stops at W_O.")
    elif after is None and names.after is not None:
        unshown = ("This model's blocks offer no hook of the residual sum after attention (the model card lists the "
                   "hooks not found), so the sum cannot be checked against the model's own numbers and is not shown.")
    return replace(names, out=out, after=None if out is None else after, norm=None if after is None else norm,
                   unshown=unshown)


def hooks_to_capture(trace: Trace, site: str, layer: int, offered: Collection[str] | None = None) -> tuple[str, ...]:
    """Every layer's hooks of `site` (of those `offered`, as `step_names`) when their scores and patterns (float32)
    fit in ALL_LAYERS_UP_TO bytes, so that a change of layer reads the same run; else this layer's only (a 2,048-token
    SmolLM2 run's scores of every layer would be 4.5 GB)."""
    n_layers = trace.n_layers(site)
    queries, keys = len(trace.query_tokens(site)), len(trace.key_tokens(site))
    every_layer = n_layers * trace.facts.n_heads * queries * keys * 2 * 4 <= ALL_LAYERS_UP_TO
    layers = range(n_layers) if every_layer else (layer,)
    return tuple(dict.fromkeys(hook for each in layers
                               for hook in step_names(trace.facts, site, each, offered).hooks()))


def step_checks(trace: Trace, names: StepNames, site: str, layer: int, weights: HeadWeights, steps: HeadSteps,
                x: np.ndarray, before: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray, str]]:
    """(step, recomputed, the model's own, its hook) for each step of the head that `trace` (with `names`' hooks)
    recorded: Q, K, V where the model has their hooks, Q and K as attention read them, the scores, the pattern, Z,
    W_O's output (gated where the model gates heads: x, (q_len, d_model), is what the queries read) and the residual
    sum (`before` + the block's output)."""
    c, head, kv = trace.captured, weights.head, weights.kv_head

    def of(hook: str) -> np.ndarray:
        return c[f"{names.attention}.{hook}"]

    rows = [(step, mine, of(hook)[index], hook) for step, mine, hook, index in (
        ("Q (before any rotation)", steps.q, "hook_q", head), ("K", steps.k, "hook_k", kv),
        ("V", steps.v, "hook_v", kv)) if f"{names.attention}.{hook}" in c]  # fused projections: no hook_q
    if steps.rot_q is not None and steps.rot_k is not None and f"{names.attention}.hook_rot_q" in c:
        rows += [("Q as attention read it", steps.rot_q, of("hook_rot_q")[head], "hook_rot_q"),
                 ("K as attention read it", steps.rot_k, of("hook_rot_k")[kv], "hook_rot_k")]
    rows += [("scores before the mask", steps.scores, of("hook_attn_scores")[head], "hook_attn_scores"),
             ("pattern (softmax)", steps.pattern, trace.head_pattern(site, layer, head), "hook_pattern"),
             ("head output Z = A V", steps.z, of("hook_z")[head], "hook_z")]
    if names.out is None:  # no hook holds what the block adds (StepNames.unshown): nothing after W_O to check
        return rows
    if names.projected:
        rows.append(("Concat(heads) W_O + b_O", output_projection(of("hook_z"), weights, x), c[names.out], names.out))
    if names.after is not None:
        rows.append(("residual add", before + c[names.out], c[names.after], names.after))
    return rows
