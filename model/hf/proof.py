"""The guard that keeps a wrong attention map off the screen: when a Hugging Face model opens, its attention as this app
computes it (model/hf/heads.py: the pattern rebuilt from the queries, keys, mask, scale and bias the model hands its
attention function) is held to transformers' own eager attention (`output_attentions=True`) on a probe text, layer by
layer, and the model's outputs to eager's. A model whose numbers differ anywhere is refused with a sentence naming the
layer, whatever path its attention took (the attention interface, or a family's own code routed through it): a
softmax with an extra logit (attention sinks), a mask the app does not know (chunks), or a score computed in code the
app never sees would otherwise be drawn without a word.

The same probe holds the app's readout to the model's own logits (model/hf/readout_proof.py): a readout that differs
is refused, not the model.

The reference is the same loaded model, its attention made transformers' eager for the probe only (before any session
can share it): a second copy would double the memory of loading."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import ModuleTap
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.heads import ATTENTION
from attention_atlas.model.hf.own_attention import use_original_methods
from attention_atlas.model.hf.placement import input_device
from attention_atlas.model.hf.readout_proof import prove_readout, readout_tap

PROOF_TEXT = "the quick brown fox jumps over the lazy dog and the cat sat on the mat"  # with the target: about
PROOF_TARGET = "while the dog ran after the fox"  # 24 tokens, past the windows and chunks of the tests' tiny models
TOLERANCE = {torch.float32: 1e-4}  # largest difference allowed in a probability, by the model's dtype
HOOKED_MARK = "_output_capturing_hooks_installed"  # transformers' mark of a model it hooked for output_attentions
HALF_TOLERANCE = 2e-2  # 16-bit models: eager rounds its probabilities to the dtype, the app computes in float32


class AttentionNotProven(UserError):
    """The app's attention for a model differs from the model's own eager attention: nothing of it is drawn."""


def prove_attention(runner: Any) -> None:
    """AttentionNotProven unless the app's run of PROOF_TEXT on `runner` (an HFRunner just loaded, not yet shared)
    gives every attention layer's probabilities, and the next-token probabilities, that transformers' eager attention
    gives on the same ids; then its readout held to the model's logits (`prove_readout`: refused on its card where
    it differs)."""
    kind = runner.family.kind
    target = None if kind == "encoder" else PROOF_TARGET  # a decoder reads it teacher-forced: nothing generated
    trace = runner.run(PROOF_TEXT, target, RunOptions(hooks=("*.hook_pattern",)))
    reference = eager_attentions(runner.model, kind, trace.ids, trace.target_ids, readout_tap(runner))
    tolerance = TOLERANCE.get(next(runner.model.parameters()).dtype, HALF_TOLERANCE)
    model_type = runner.model.config.model_type
    for site, layers in reference["attentions"].items():
        found = trace.n_layers(site)
        if found != len(layers):
            raise AttentionNotProven(
                f"{model_type}: the model reports {len(layers)} attention layers at {site}, this app found {found}, so "
                "its attention cannot be shown truthfully yet.")
        for layer, expected in enumerate(layers):  # expected: (heads, q_len, k_len)
            drawn = trace.pattern_source(site, layer).pattern(dtype=np.float32)
            difference = float(np.abs(drawn - expected).max()) if drawn.shape == expected.shape else float("inf")
            if not difference <= tolerance:
                raise AttentionNotProven(
                    f"{model_type}: the attention this app computes differs from the model's own (transformers' eager "
                    f"attention) by {difference:.2g} in layer {layer} of {site}, so its attention maps cannot be shown "
                    "truthfully yet.")
    if "next" in reference:
        drawn = trace.outputs["top_next_probs"]
        expected = reference["next"][trace.outputs["top_next_ids"]]
        difference = float(np.abs(drawn - expected).max())
        if not difference <= tolerance:
            raise AttentionNotProven(
                f"{model_type}: with this app's attention the model's next-token probabilities differ from its own "
                f"by {difference:.2g}, so its runs cannot be shown truthfully yet.")
    if "stream" in reference:
        prove_readout(runner, reference["stream"], reference["logits"])


def eager_attentions(model: nn.Module, kind: str, ids: list[int], target_ids: list[int],
                     stream: ModuleTap | None = None) -> dict[str, Any]:
    """transformers' eager attention on `ids` (and `target_ids`, for an encoder-decoder): {"attentions": {site:
    [(heads, q_len, k_len) float32 per layer]}, "next": (vocab,) next-token probabilities (decoders), "logits":
    (vocab,) float32 at the last position (decoders and encoder-decoders), "stream": (1, d_model) what `stream`
    reads there in the same pass (the stack's output the logits were made from)}."""
    device = input_device(model)
    tensor = torch.tensor([ids], device=device)  # (1, len)
    read: list[torch.Tensor] = []
    with transformers_eager(model), torch.inference_mode():
        if stream is not None:  # removed on leaving, with every hook added inside
            stream.module.register_forward_hook(lambda module, args, kwargs, out: read.append(
                stream.read(args, kwargs, out)[0, -1:].clone()), with_kwargs=True)
        if kind == "encoder-decoder":
            out = model(input_ids=tensor, decoder_input_ids=torch.tensor([target_ids], device=device),
                        output_attentions=True)
            sites = {"encoder.attn": out.encoder_attentions, "decoder.attn": out.decoder_attentions,
                     "decoder.cross_attn": out.cross_attentions}
        else:
            out = model(input_ids=tensor, output_attentions=True, **({"use_cache": False} if kind == "decoder" else {}))
            sites = {f"{'decoder' if kind == 'decoder' else 'encoder'}.attn": out.attentions}
    found: dict[str, Any] = {"attentions": {site: [layer[0].float().cpu().numpy() for layer in layers]
                                            for site, layers in sites.items()}}
    if kind == "decoder":
        found["next"] = out.logits[0, -1].float().softmax(-1).cpu().numpy()
    if kind != "encoder":
        found["logits"] = out.logits[0, -1].float().cpu().numpy()
    if read:
        found["stream"] = read[-1]
    return found


@contextmanager
def transformers_eager(model: nn.Module) -> Iterator[None]:
    """Inside, `model` computes attention with transformers' own eager code: the implementation set to "eager" where
    it was loaded with the app's (model/hf/heads.py), and a family's attention modules given back their own methods
    where the app routed them (model/hf/own_attention.py). Not for a model that a session may be running."""
    loaded_with = model.config._attn_implementation
    swapped = use_original_methods(model)  # [(module, name, the app's method)]
    if loaded_with == ATTENTION:
        model.set_attn_implementation("eager")
    try:
        with _hooks_left_as_found(model):
            yield
    finally:
        if loaded_with == ATTENTION:
            model.set_attn_implementation(ATTENTION)
        for module, name, method in swapped:
            setattr(module, name, method)


@contextmanager
def _hooks_left_as_found(model: nn.Module) -> Iterator[None]:
    """Inside, transformers may hook the model for good (`output_attentions` installs its output-capturing forward
    hooks once, and marks the model so): on leaving, every hook added inside is removed and the mark taken off, so
    the shared model carries no hook of the probe's."""
    found = {module: set(module._forward_hooks) for module in model.modules()}
    marked = {module for module in model.modules() if HOOKED_MARK in vars(module)}
    try:
        yield
    finally:
        for module in model.modules():
            for key in set(module._forward_hooks) - found.get(module, set()):
                del module._forward_hooks[key]
                module._forward_hooks_with_kwargs.pop(key, None)
                module._forward_hooks_always_called.pop(key, None)
            if module not in marked:
                vars(module).pop(HOOKED_MARK, None)
