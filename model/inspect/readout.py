"""What pages need from a loaded model beyond its hooks: its unembedding (the logit lens; some tokens' rows, for
direct logit attribution) and one plain forward pass on a trace's tokens (for the shape trace). Read-only: the
shared model's weights are used, never changed, and nothing stays registered on it.

A Hugging Face model's readout is held to its own logits when it opens (model/hf/readout_proof.py); where it differs,
the model card says how (`READOUT_REFUSED`), and the unembedding and its rows are refused with that sentence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.placement import computing_device, exclusive, input_device, weights_at_hand
from attention_atlas.model.hf.runner import HFRunner
from attention_atlas.model.hf.text import TokenText
from attention_atlas.model.inspect.lens import Unembedding
from attention_atlas.model.inspect.logit_scales import head_scales
from attention_atlas.model.scratch.transformer import EncoderDecoder
from attention_atlas.model.toy.runner import ToyRunner

POST_NORM = "no final norm (post-norm: each layer's output is already normalised)"
NO_LM_HEAD = ("{model} is {family}: it has no unembedding (no matrix that turns its vectors into token scores), "
              "so there is no logit lens to show. The other views work.")
READOUT_REFUSED = "logit readout refused"  # the model card's note where the readout differs from the model's logits


def readout_refusal(runner: HFRunner) -> str | None:
    """Why the runner's readout is refused (it differed from the model's own logits when it opened), or None."""
    return runner.facts.notes.get(READOUT_REFUSED)


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
    """lm_head (with BART's and Marian's final_logits_bias, the scalings of logit_scales.py, Gemma 2's soft-capping)
    after the final norm."""
    model, family = runner.model, runner.family
    head = model.get_output_embeddings()
    if head is None:
        return NO_LM_HEAD.format(model=runner.facts.model_id, family=f"{type(model).__name__} ({family.name})")
    if refusal := readout_refusal(runner):
        return refusal
    final = model.base_model.get_submodule(family.final_norm) if family.final_norm else None
    bias = getattr(model, "final_logits_bias", None)  # (1, vocab) or None
    scale, factor = head_scales(model.config)
    cap = getattr(model.config, "final_logit_softcapping", None)  # Gemma 2: c tanh(logits / c)

    def readout(x: torch.Tensor) -> torch.Tensor:  # (rows, d_model) -> (rows, vocab)
        with exclusive(head):  # and the final norm: the same model's lock
            x = x.to(computing_device(head), head.weight.dtype)
            logits = head((final(x) if final is not None else x) * scale) * factor
        logits = logits + bias if bias is not None else logits
        return (torch.tanh(logits / cap) * cap if cap else logits).float().cpu()

    stack = "encoder" if family.kind == "encoder" else "decoder"
    norm = f"its final norm {family.final_norm}" if family.final_norm else POST_NORM
    return Unembedding(stack, _layer_output(family.norm), norm, readout)


@dataclass(frozen=True)
class LogitMap:
    """Some tokens' logits as an affine map of what the unembedding reads (the final norm's output, or a post-norm
    model's last layer's output): logits = x @ directions.T + constants, before any soft-capping."""

    directions: np.ndarray  # (tokens, d_model) float64
    constants: np.ndarray  # (tokens,) float64: the unembedding's biases
    softcap: float | None  # Gemma 2: the logits are then capped to c tanh(logit / c)


def logit_map(runner: Runner, ids: list[int]) -> LogitMap:
    """The unembedding's rows for `ids` (the toy generator's, or lm_head's with the scalings of logit_scales.py,
    BART's and Marian's final_logits_bias and Gemma 2's cap), read from the loaded model."""
    if isinstance(runner, ToyRunner):
        return _rows(runner.toy.model.generator.proj, ids, (1.0, 1.0), None, None)
    if isinstance(runner, HFRunner):
        model = runner.model
        head = model.get_output_embeddings()
        if head is None:
            raise UserError(NO_LM_HEAD.format(model=runner.facts.model_id, family=type(model).__name__))
        if refusal := readout_refusal(runner):
            raise UserError(refusal)
        scale, factor = head_scales(model.config)
        final_bias = getattr(model, "final_logits_bias", None)  # (1, vocab) or None
        return _rows(head, ids, (scale, factor), None if final_bias is None else final_bias[0],
                     getattr(model.config, "final_logit_softcapping", None))
    raise UserError(f"{runner.facts.model_id}: this kind of model has no unembedding here.")


def _rows(head: nn.Module, ids: list[int], scales: tuple[float, float], extra_bias: torch.Tensor | None,
          softcap: float | None) -> LogitMap:
    """`scales`: what the head's input and its logits are multiplied by (logit_scales.head_scales)."""
    into, out = scales
    with torch.no_grad(), weights_at_hand(head):
        directions = head.weight[ids].double().cpu().numpy() * (into * out)  # (tokens, d_model): a Linear's rows
        constants = np.zeros(len(ids)) if head.bias is None else head.bias[ids].double().cpu().numpy() * out
    if extra_bias is not None:
        constants = constants + extra_bias[ids].double().cpu().numpy()
    return LogitMap(directions, constants, softcap)


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
    text = getattr(runner, "text", None)  # a Hugging Face tokenizer's (model/hf/text.py): here, or a model on NDIF's
    if isinstance(text, TokenText):
        return text.tokens  # the runner's own spelling (byte-level markers turned back into spaces)
    raise UserError(f"{runner.facts.model_id}: no vocabulary here")
