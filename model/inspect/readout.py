"""What the Activations page needs from a loaded model beyond its hooks: its unembedding (for the logit lens)
and one plain forward pass on a trace's tokens (for the shape trace). Read-only: the shared model's weights
are used, never changed, and nothing stays registered on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.placement import computing_device, exclusive, input_device
from attention_atlas.model.hf.runner import HFRunner
from attention_atlas.model.inspect.lens import Unembedding
from attention_atlas.model.scratch.transformer import EncoderDecoder
from attention_atlas.model.toy.runner import ToyRunner

POST_NORM = "no final norm (post-norm: each layer's output is already normalised)"
NO_LM_HEAD = ("{model} is {family}: it has no unembedding (no matrix that turns its vectors into token scores), "
              "so there is no logit lens to show. The other views work.")


def unembedding_for(runner: Runner) -> Unembedding | str:
    """The runner's unembedding, or why it has none."""
    if isinstance(runner, ToyRunner):
        return _toy_unembedding(runner)
    if isinstance(runner, HFRunner):
        return _hf_unembedding(runner)
    return f"{runner.facts.model_id}: this kind of model has no logit lens here."


def _layer_output(norm: str) -> str:
    return "hook_normalized_resid_post" if norm.startswith("post") else "hook_resid_post"


def _toy_unembedding(runner: ToyRunner) -> Unembedding:
    """The generator's linear map, after the decoder's final LayerNorm if the layers are pre-norm."""
    model = runner.toy.model
    proj, final = model.generator.proj, model.decoder.ln_final

    def readout(x: torch.Tensor) -> torch.Tensor:  # (rows, d_model) -> (rows, vocab)
        return proj(final(x) if final is not None else x)

    norm = "its final LayerNorm" if final is not None else POST_NORM
    return Unembedding("decoder", _layer_output(runner.facts.norm), norm, readout)


def _hf_unembedding(runner: HFRunner) -> Unembedding | str:
    """lm_head (with BART's and Marian's final_logits_bias, T5's output scaling, Gemma 2's soft-capping) after the
    final norm."""
    model, family = runner.model, runner.family
    head = model.get_output_embeddings()
    if head is None:
        return NO_LM_HEAD.format(model=runner.facts.model_id, family=f"{type(model).__name__} ({family.name})")
    final = model.base_model.get_submodule(family.final_norm) if family.final_norm else None
    bias = getattr(model, "final_logits_bias", None)  # (1, vocab) or None
    scale = model.config.d_model ** -0.5 if getattr(model.config, "scale_decoder_outputs", False) else 1.0

    cap = getattr(model.config, "final_logit_softcapping", None)  # Gemma 2: c tanh(logits / c)

    def readout(x: torch.Tensor) -> torch.Tensor:  # (rows, d_model) -> (rows, vocab)
        with exclusive(head):  # and the final norm: the same model's lock
            x = x.to(computing_device(head), head.weight.dtype)
            logits = head((final(x) if final is not None else x) * scale)
        logits = logits + bias if bias is not None else logits
        return (torch.tanh(logits / cap) * cap if cap else logits).float().cpu()

    stack = "encoder" if family.kind == "encoder" else "decoder"
    norm = f"its final norm {family.final_norm}" if family.final_norm else POST_NORM
    return Unembedding(stack, _layer_output(family.norm), norm, readout)


def forward_for(runner: Runner, trace: Trace) -> tuple[nn.Module, Callable[[], Any]]:
    """The model and one forward pass over the trace's tokens (no masks: shapes do not depend on them). A causal
    LM computes the logits of its last position only, as the app's runs do (all of them: 400 MB at 2k tokens)."""
    ids, target_ids = trace.ids, trace.target_ids
    if isinstance(runner, ToyRunner):
        model = runner.toy.model
        src = torch.tensor([ids], device=model.device)
        if isinstance(model, EncoderDecoder):
            return model, lambda: model(src, torch.tensor([target_ids], device=model.device))
        return model, lambda: model(src)
    if isinstance(runner, HFRunner):
        model = runner.model
        src = torch.tensor([ids], device=input_device(model))
        if runner.family.kind == "encoder-decoder":
            tgt = torch.tensor([target_ids], device=input_device(model))
            return model, lambda: model(input_ids=src, decoder_input_ids=tgt, use_cache=False)
        if runner.family.kind == "decoder":
            return model, lambda: model(input_ids=src, logits_to_keep=1, use_cache=False)
        return model, lambda: model(input_ids=src)
    raise UserError(f"{runner.facts.model_id}: no shape trace for this kind of model")


def spell_for(runner: Runner) -> Callable[[list[int]], list[str]]:
    """Token ids -> how they read, as the runner writes its trace's tokens."""
    if isinstance(runner, ToyRunner):
        return runner.toy.tokenizer.tokens
    if isinstance(runner, HFRunner):
        return runner.text.tokens  # the runner's own spelling (byte-level markers turned back into spaces)
    raise UserError(f"{runner.facts.model_id}: no vocabulary here")
