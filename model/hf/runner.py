"""Running a Hugging Face model on a person's text under capture, into the same Trace as the toy models.

Masks are built here as one (q_len, k_len) bool matrix per self-attention site (True = may attend)
and handed to the model as a 4D additive mask, so that a causal mask can be switched on for an
encoder or off for a decoder without touching the shared model. Attention runs fused (heads.py); its
probabilities are kept as what they are computed from, and computed when a page reads them
(model/core/attention/source.py). The model card's facts come from facts.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.capture.ablation import Outcome, ablating
from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.capture.record import Captured, capture
from attention_atlas.model.core.devices import free_accelerator_memory, is_out_of_memory
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.generation.forcing import score_target
from attention_atlas.model.core.masks import additive_mask, self_attention_mask
from attention_atlas.model.core.options import AblationMode, Head, RunOptions
from attention_atlas.model.core.runner import trace_of_run
from attention_atlas.model.core.text_checks import validate_text
from attention_atlas.model.core.trace.facts import OutputKind
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.ablation import ablation_outcomes, gradients, patched_outcomes
from attention_atlas.model.hf.encoder_decoder import decode_target, encode_source
from attention_atlas.model.hf.examples import EXAMPLES
from attention_atlas.model.hf.facts import model_facts
from attention_atlas.model.hf.inputs import masked_inputs
from attention_atlas.model.hf.kv_cache import cache_argument, returned_cache
from attention_atlas.model.hf.placement import input_device
from attention_atlas.model.hf.stepper import hf_stepper
from attention_atlas.model.hf.taps import Family
from attention_atlas.model.hf.text import TokenText, eos_ids

MAX_TEXT_CHARS = 100_000  # before tokenising (above the text box's 60,000; 45 ms for SmolLM2's tokenizer): the
# token limit (facts.max_len) is the real one
CONTINUATION_TOKENS = 8  # a causal LM's greedy continuation shown as its output
CONTINUATION_MAX_PROMPT = 512  # longer prompts show the next-token choice only (generating re-reads the prompt)
MAX_GENERATED = 64  # longest output an encoder-decoder model writes
TOP_K = 10


class HFRunner:
    """A loaded Hugging Face model (eager attention) with the hook taps of its family."""

    def __init__(
        self,
        model_id: str,
        model: nn.Module,
        tokenizer: Any,
        family: Family,
        notes: dict[str, Any],
        cpu_loader: Callable[[], nn.Module] | None = None,
    ) -> None:
        """cpu_loader loads the same model on the CPU, for runs a GPU cannot hold."""
        self.model, self.tokenizer, self.family = model, tokenizer, family
        self._cpu_loader = cpu_loader
        self.taps = family.taps(model)  # hook name -> module and reader
        self.examples = EXAMPLES[family.kind]
        facts = model_facts(model_id, model, family, notes)
        self.facts = replace(facts, special_ids=sorted(set(tokenizer.all_special_ids)))
        self.text = TokenText(tokenizer, model_id, self.facts.max_len)
        self._cpu_copy: nn.Module | None = None
        self._cpu_copy_lock = threading.Lock()

    @property
    def max_tokens(self) -> int:
        return self.facts.max_len

    # -- entry point ---------------------------------------------------------------------------
    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        validate_text(text, MAX_TEXT_CHARS)
        if target is not None:
            validate_text(target, MAX_TEXT_CHARS, what="target")
        try:
            return replace(self._run(self.model, text, target, options), text=text, target=target)
        except (torch.OutOfMemoryError, RuntimeError) as error:
            if self.facts.device == "cpu" or self._cpu_loader is None or not is_out_of_memory(error):
                raise
        free_accelerator_memory()
        trace = self._run(self._cpu_model(), text, target, options)
        message = f"The {self.facts.device.split(':')[0].upper()} ran out of memory; this run used the CPU instead."
        facts = replace(trace.facts, device="cpu", precision="float32")  # the CPU copy is float32 (`_cpu_model`)
        return replace(trace, facts=facts, fallback=message, text=text, target=target)

    def _cpu_model(self) -> nn.Module:
        """A CPU copy of the model, made once, for runs the GPU cannot hold."""
        with self._cpu_copy_lock:
            if self._cpu_copy is None:
                assert self._cpu_loader is not None
                self._cpu_copy = self._cpu_loader()
            return self._cpu_copy

    def cautions(self, text: str) -> tuple[str, ...]:
        return ()

    def stepper(self, text: str, options: RunOptions, use_cache: bool = True) -> Stepper:
        """Generation from `text`, one token at a time (model/hf/stepper.py); use_cache=False re-reads the whole
        sequence at every step even where a KV cache could be used (the reference the cache is tested against)."""
        return hf_stepper(self.model, self.taps, self.family.kind, self.text, text, options, use_cache)

    def _run(self, model: nn.Module, text: str, target: str | None, options: RunOptions) -> Trace:
        with ablating(self._taps(model), options.ablated, options.ablation, self.facts.n_heads):  # generation too
            if self.family.kind == "encoder-decoder":
                return self._run_encoder_decoder(model, text, target, options)
            return self._run_single_stack(model, text, target, options)

    # -- encoder-only and decoder-only ---------------------------------------------------------
    def _run_single_stack(self, model: nn.Module, text: str, target: str | None, options: RunOptions) -> Trace:
        """An encoder, or a causal LM reading the text (and the target after it, teacher-forced, if given)."""
        is_decoder = self.family.kind == "decoder"
        stack = "decoder" if is_decoder else "encoder"
        ids = self.text.encode(text)
        target_ids = self.text.encode_continuation(target, len(ids)) if is_decoder and target is not None else []
        sequence = ids + target_ids
        padded = options.padded(sequence, self.text.pad_id(), self.max_tokens)
        causal = options.causal_for(stack)
        allowed = self_attention_mask(len(padded), len(sequence), causal, options.blocked)
        device = input_device(model)
        input_ids = torch.tensor([padded], device=device)
        # a causal LM computes the logits of the positions it is asked about only: (len, vocab) of them
        # would be 400 MB at 2k. Those are the last real token, and with a target every position before one.
        scored = torch.arange(len(ids) - 1, len(sequence), device=device)
        # a causal LM's greedy continuation goes on from this pass's keys and values where `generate` continues it
        reused = is_decoder and target is None and padded == ids and self._generates(ids, options)
        inputs = (masked_inputs(input_ids, allowed, model.dtype) | {"logits_to_keep": scored, "use_cache": reused}
                  if is_decoder else
                  {"input_ids": input_ids, "attention_mask": additive_mask(allowed.to(device), model.dtype)})
        out, captured = capture(model, self._taps(model), options.hooks, lambda: model(**inputs), options.summarised,
                                {stack: padded})  # the ids: the summary's induction targets
        masks = {f"{stack}.attn": allowed[0, 0]}
        if not is_decoder:
            outputs = {"token_similarity": _cosine_similarity(out.last_hidden_state[0])}
            return self._trace(padded, [], masks, captured, outputs, "", "embeddings", options)
        logits = out.logits[0]  # (len(scored), vocab)
        outputs = self._top_next(logits[-1])
        if target is not None:
            outputs |= score_target(logits[:-1], target_ids, self.text.tokens)
            return self._trace(padded, [], masks, captured, outputs, target, "teacher-forced", options)
        first = int(outputs["top_next_ids"][0])
        text_out, kind = self._continuation(model, ids, first, options, returned_cache(out) if reused else None)
        return self._trace(padded, [], masks, captured, outputs, text_out, kind, options)

    def _top_next(self, logits: torch.Tensor) -> dict[str, np.ndarray]:
        """The TOP_K most likely next tokens from one position's logits (vocab,)."""
        top = logits.float().softmax(-1).topk(TOP_K)
        top_ids = top.indices.tolist()
        return {
            "top_next_ids": np.array(top_ids),
            "top_next_probs": top.values.cpu().numpy(),
            "top_next_tokens": np.array(self.text.tokens(top_ids), dtype=str),
        }

    @staticmethod
    def _generates(ids: list[int], options: RunOptions) -> bool:
        """Whether the continuation of `ids` is made by `generate` and its KV cache: a prompt short enough to be
        continued, under the causal mask, every head whole."""
        return (len(ids) <= CONTINUATION_MAX_PROMPT and options.causal_for("decoder") and not options.blocked
                and not options.ablated)

    def _continuation(
        self, model: nn.Module, ids: list[int], first: int, options: RunOptions, cache: Any = None
    ) -> tuple[str, OutputKind]:
        """The greedy continuation under the masks and ablations of the traced pass, starting with its top next
        token `first`. With the causal mask and every head whole, `generate` (and its KV cache: `cache`, the traced
        pass's keys and values of `ids`, where it kept them, so the prompt is not read again) gives the same
        tokens; otherwise (no causal mask, blocked pairs, ablated heads) every step re-reads the whole sequence
        under them (an ablation by the mean over positions needs them all)."""
        if len(ids) > CONTINUATION_MAX_PROMPT:
            return self.text.decode([first]), "next token"
        sequence = [*ids, first]
        causal, blocked = options.causal_for("decoder"), options.blocked
        with torch.inference_mode():
            if self._generates(ids, options):
                generated = model.generate(
                    torch.tensor([sequence], device=input_device(model)),
                    attention_mask=torch.ones(1, len(sequence), device=input_device(model)),
                    max_new_tokens=CONTINUATION_TOKENS - 1, do_sample=False, pad_token_id=self.text.pad_id(),
                    use_cache=True, **cache_argument(model, cache),  # a config may turn it off (MPT's): generate
                )  # would then read the whole sequence again at every step onto the cache it was given
                sequence = generated[0].tolist()
            else:
                while len(sequence) - len(ids) < CONTINUATION_TOKENS and sequence[-1] not in eos_ids(model):
                    visible = tuple(pair for pair in blocked if max(pair) < len(sequence))
                    allowed = self_attention_mask(len(sequence), len(sequence), causal, visible)
                    logits = model(**masked_inputs(torch.tensor([sequence], device=input_device(model)), allowed,
                                                   model.dtype), logits_to_keep=1).logits[0, -1]
                    sequence.append(int(logits.argmax()))
        return self.text.decode(sequence[len(ids):]), "generated"  # specials kept: an end token is news

    # -- encoder-decoder -----------------------------------------------------------------------
    def _run_encoder_decoder(self, model: nn.Module, text: str, target: str | None, options: RunOptions) -> Trace:
        device = input_device(model)
        ids = self.text.encode(text)
        padded = options.padded(ids, self.text.pad_id(), self.max_tokens)
        src = torch.tensor([padded], device=device)
        real_keys = (torch.arange(len(padded), device=device) < len(ids)).long()[None]  # (1, src_len)
        encoder_causal, decoder_causal = options.causal_for("encoder"), options.causal_for("decoder")
        enc_allowed = self_attention_mask(len(padded), len(ids), encoder_causal, options.blocked)
        start = model.config.decoder_start_token_id

        def encode() -> Any:
            return encode_source(model, src, enc_allowed)

        def decode(encoder_out: Any, tgt_ids: list[int]) -> Any:
            dec_allowed = self_attention_mask(len(tgt_ids), len(tgt_ids), decoder_causal, ())
            return decode_target(model, encoder_out, real_keys, torch.tensor([tgt_ids], device=device), dec_allowed)

        labels = self._generate(encode, decode, start, model) if target is None else self.text.encode(target, "target")
        tgt_ids = [start, *labels[:-1]]
        out, captured = capture(model, self._taps(model), options.hooks, lambda: decode(encode(), tgt_ids),
                                 options.summarised, {"encoder": padded, "decoder": tgt_ids})
        predicted = out.logits[0].argmax(-1).tolist()
        masks = {
            "encoder.attn": enc_allowed[0, 0],
            "decoder.attn": self_attention_mask(len(tgt_ids), len(tgt_ids), decoder_causal, ())[0, 0],
            "decoder.cross_attn": real_keys.bool().cpu().expand(len(tgt_ids), -1),
        }
        outputs = {
            "predicted_ids": np.array(predicted),
            "predicted_tokens": np.array(self.text.tokens(predicted), dtype=str),
        }
        if target is not None:
            outputs |= score_target(out.logits[0], labels, self.text.tokens)
            return self._trace(padded, tgt_ids, masks, captured, outputs, target, "teacher-forced", options)
        output_text = self.text.decode(labels, skip_special_tokens=True)
        return self._trace(padded, tgt_ids, masks, captured, outputs, output_text, "generated", options)

    def _generate(
        self, encode: Callable[[], Any], decode: Callable[[Any, list[int]], Any], start: int, model: nn.Module
    ) -> list[int]:
        """Greedy decoding under the masks of the traced pass: the encoder once, then the whole decoder input
        at every step (no KV cache, so a decoder without its causal mask is decoded as it is traced)."""
        eos, labels = eos_ids(model), []
        with torch.inference_mode():
            encoder_out = encode()
            for _ in range(min(MAX_GENERATED, self.max_tokens - 1)):  # and its end token, re-read as a target
                next_id = int(decode(encoder_out, [start, *labels]).logits[0, -1].argmax())
                labels.append(next_id)
                if next_id in eos:
                    break
        return labels

    # -- ablation ------------------------------------------------------------------------------
    def ablation_outcomes(self, trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome:
        """What `trace`'s input leads to once per row of `rows` (the heads ablated in that row), in one batch
        (model/hf/ablation.py)."""
        return ablation_outcomes(self.model, self.taps, self.family.kind, self.facts.n_heads, trace, rows, mode)

    def patched_outcomes(self, trace: Trace, clean: dict[str, np.ndarray], rows: Sequence[Patch | None]) -> Outcome:
        """What `trace`'s input (the corrupted text) leads to once per row of `rows` (the clean run's activation
        patched in, or None), in one batch (model/hf/ablation.py)."""
        return patched_outcomes(self.model, self.taps, self.family.kind, trace, clean, rows)

    def gradients(self, trace: Trace, hooks: Sequence[str], position: int,
                  metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
        """The gradient of `metric(the logits after `position` of the decoder's sequence)` with respect to each hook's
        value in a run of `trace`'s input (model/hf/ablation.py)."""
        return gradients(self.model, self.taps, self.family.kind, trace, hooks, position, metric)

    # -- shared --------------------------------------------------------------------------------
    def _taps(self, model: nn.Module) -> dict[str, ModuleTap | ReportedTap]:
        """The taps of `model`: this runner's, or its CPU copy's."""
        return self.taps if model is self.model else self.family.taps(model)

    def _trace(
        self,
        ids: list[int],
        target_ids: list[int],
        masks: dict[str, torch.Tensor],
        captured: dict[str, Captured],
        outputs: dict[str, np.ndarray],
        output_text: str,
        output_kind: OutputKind,
        options: RunOptions,
    ) -> Trace:
        return trace_of_run(self.facts, ids, target_ids, self.text.tokens, masks, captured, outputs=outputs,
                            output_text=output_text, options=options, output_kind=output_kind)


def _cosine_similarity(hidden: torch.Tensor) -> np.ndarray:
    """(len, d) token vectors -> (len, len) cosine similarities."""
    unit = torch.nn.functional.normalize(hidden.float(), dim=-1)
    return (unit @ unit.T).cpu().numpy()

