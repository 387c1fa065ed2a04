"""Running a shipped toy model on a person's text, with masks as asked, into a Trace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.attention.arrays import as_tensor
from attention_atlas.model.core.capture.ablation import Outcome, ablating, ablating_rows
from attention_atlas.model.core.capture.patching import Patch, metric_gradients, patching_rows, point_editing
from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.generation.forcing import score_target
from attention_atlas.model.core.masks import padding_mask, self_attention_mask
from attention_atlas.model.core.options import AblationMode, Head, RunOptions
from attention_atlas.model.core.runner import trace_of_run
from attention_atlas.model.core.trace.facts import DecodeStep, ModelFacts
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.scratch.transformer import EncoderDecoder
from attention_atlas.model.toy.stepper import toy_stepper
from attention_atlas.model.toy.store import ToyModel

DECODER_PATTERNS = ("decoder.*attn.hook_pattern",)  # captured at every generation step


class ToyRunner:
    """Runs a trained from-scratch model. Encoder-decoder: source -> encoder, <s> + output -> decoder.
    Decoder-only: <s> + source + separator + output in one causal stack."""

    def __init__(self, model_id: str, toy: ToyModel) -> None:
        self.toy = toy
        self.examples = toy.task.examples
        cfg, model = toy.model.cfg, toy.model
        encoder_decoder = isinstance(model, EncoderDecoder)
        self.facts = ModelFacts(
            model_id=model_id,
            family="from-scratch transformer (Vaswani et al. 2017)",
            kind=cfg.kind,
            n_encoder_layers=cfg.n_encoder_layers if encoder_decoder else 0,
            n_decoder_layers=cfg.n_decoder_layers,
            n_heads=cfg.n_heads,
            n_kv_heads=cfg.n_heads,
            d_model=cfg.d_model,
            d_ff=cfg.d_ff,
            vocab_size=cfg.vocab_size,
            max_len=cfg.max_len,
            positional="sinusoidal",
            norm=f"{cfg.norm}-norm",
            n_params=sum(p.numel() for p in model.parameters()),
            device=str(model.device),
            special_ids=[toy.tokenizer.pad_id, toy.tokenizer.bos_id, toy.tokenizer.eos_id],
            notes={
                "task": toy.task.description,
                "characters it knows": toy.source_chars,
                "trained on": f"sources of 1–{toy.task.max_source_chars} characters (longer ones run, but are "
                              "outside what it learned)",
                **training_notes(toy.training),
            },
        )

    def stepper(self, text: str, options: RunOptions) -> Stepper:
        """Generation from `text`, one token at a time (model/toy/stepper.py)."""
        return toy_stepper(self.toy, text, options)

    def cautions(self, text: str) -> tuple[str, ...]:
        """A text longer than the training examples (one the model cannot read at all gets an error instead)."""
        trained, length = self.toy.task.max_source_chars, len(self.toy.source_text(text))
        if length <= trained:
            return ()
        try:
            self.toy.encode_source(text)
        except ValueError:
            return ()
        return (f"{self.facts.model_id} was trained on texts of 1–{trained} characters; this one has {length}. "
                "Its output is outside what it learned and may well be wrong.",)

    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        model = self.toy.model
        with ablating(model.hook_points, options.ablated, options.ablation, model.cfg.n_heads):  # generation too
            run = self._run_encoder_decoder if isinstance(model, EncoderDecoder) else self._run_decoder_only
            return replace(run(text, target, options), text=text, target=target)

    def ablation_outcomes(self, trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome:
        """The log-probabilities `trace`'s input leads to, once per row of `rows` (the heads ablated in that row),
        in one batch (`_edited_outcomes`)."""
        model = self.toy.model
        return self._edited_outcomes(trace, len(rows), ablating_rows(model.hook_points, rows, mode, model.cfg.n_heads))

    def patched_outcomes(self, trace: Trace, clean: dict[str, np.ndarray], rows: Sequence[Patch | None]) -> Outcome:
        """The log-probabilities `trace`'s input (the corrupted text) leads to, once per row of `rows` (the clean
        run's activation patched in, or None), in one batch (`_edited_outcomes`)."""
        return self._edited_outcomes(trace, len(rows), patching_rows(self.toy.model.hook_points, rows, clean))

    def gradients(self, trace: Trace, hooks: Sequence[str], position: int,
                  metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
        """The gradient of `metric(the log-probabilities after `position` of the decoder's sequence)` (a difference of
        them is one of logits) with respect to each hook's value in a run of `trace`'s input."""
        def logits() -> torch.Tensor:
            log_probs, positions = self._log_probs(trace, 1)
            if position not in positions:
                raise UserError(f"{self.facts.model_id}'s runs here read the prediction after token {positions[0]} "
                                f"(the prompt's last) or later, not {position}.")
            return log_probs[0, positions.index(position)]  # (vocab,)

        return metric_gradients(point_editing, self.toy.model.hook_points, hooks, logits, metric)

    def _edited_outcomes(self, trace: Trace, batch: int, edits: AbstractContextManager[None]) -> Outcome:
        """The log-probabilities in each of `batch` rows under `edits` (`_log_probs`)."""
        with edits, torch.inference_mode():
            log_probs, positions = self._log_probs(trace, batch)
        return Outcome("distributions", log_probs.float().cpu().numpy(), positions)

    def _log_probs(self, trace: Trace, batch: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """(batch, positions, vocab) log-probabilities: an encoder-decoder's at every output position (reading the
        trace's output), a decoder-only model's from the prompt's last token on (its answer and the end); and those
        positions of the decoder's sequence."""
        model = self.toy.model
        masks = {site: as_tensor(mask, model.device)[None, None] for site, mask in trace.masks.items()}
        source = self._tensor(trace.ids).expand(batch, -1)
        if isinstance(model, EncoderDecoder):
            target = self._tensor(trace.target_ids).expand(batch, -1)
            log_probs = model(source, target, masks["encoder.attn"], masks["decoder.attn"],
                              masks["decoder.cross_attn"])  # (batch, tgt_len, vocab)
            positions = tuple(range(len(trace.target_ids)))
        else:
            log_probs = model(source, masks["decoder.attn"])  # (batch, len, vocab)
            positions = tuple(range(self._prompt_length(trace) - 1, len(trace.ids)))
        return log_probs[:, list(positions)], positions

    def _prompt_length(self, trace: Trace) -> int:
        """How many of a decoder-only trace's ids are the prompt: the rest is its answer, then padding."""
        if trace.output_kind == "generated":
            answer = len(self._answer(trace.steps))
        else:
            answer = len(self.toy.encode_target(trace.output_text)) - 1  # the target without its </s>
        return sum(i != self.toy.tokenizer.pad_id for i in trace.ids) - answer

    # -- masks ---------------------------------------------------------------------------------
    def _self_mask(self, ids: torch.Tensor, causal: bool, blocked: tuple[tuple[int, int], ...]) -> torch.Tensor:
        """(1, 1, len, len) for ids (1, len) whose padding, if any, comes last (RunOptions.padded)."""
        real = int((ids[0] != self.toy.tokenizer.pad_id).sum())
        return self_attention_mask(ids.size(1), real, causal, blocked, ids.device)

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.toy.model.device)

    # -- encoder-decoder -----------------------------------------------------------------------
    def _run_encoder_decoder(self, text: str, target: str | None, options: RunOptions) -> Trace:
        toy, model = self.toy, self.toy.model
        tok = toy.tokenizer
        src = self._tensor(options.padded(toy.encode_source(text), tok.pad_id, model.cfg.max_len))
        enc_mask = self._self_mask(src, options.causal_for("encoder"), options.blocked)
        cross_mask = padding_mask(src, tok.pad_id)  # (1, 1, 1, src_len)

        steps: list[DecodeStep] = []
        if target is None:
            with torch.inference_mode():
                memory = model.encode(src, enc_mask)  # (1, src_len, d_model), shared by every step

            def decode_step(tgt: torch.Tensor) -> torch.Tensor:
                dec_mask = self._self_mask(tgt, options.causal_for("decoder"), ())
                return model.generator(model.decode(memory, tgt, dec_mask, cross_mask))

            steps = self._generate([tok.bos_id], decode_step, model.cfg.max_len - 1)
            tgt_ids = [tok.bos_id, *self._answer(steps)]
        else:
            tgt_ids = [tok.bos_id, *toy.encode_target(target)[:-1]]
        tgt = self._tensor(tgt_ids)
        dec_mask = self._self_mask(tgt, options.causal_for("decoder"), ())
        log_probs, captured = capture(
            model, model.hook_points, options.hooks, lambda: model(src, tgt, enc_mask, dec_mask, cross_mask)
        )
        masks = {
            "encoder.attn": enc_mask[0, 0],
            "decoder.attn": dec_mask[0, 0],
            "decoder.cross_attn": cross_mask.expand(-1, -1, tgt.size(1), -1)[0, 0],
        }
        return self._trace(text, src, tgt_ids, masks, captured, log_probs[0], target, 0, options, steps)

    # -- decoder-only --------------------------------------------------------------------------
    def _run_decoder_only(self, text: str, target: str | None, options: RunOptions) -> Trace:
        toy, model = self.toy, self.toy.model
        prompt = toy.encode_source(text)

        def forward(seq: torch.Tensor) -> torch.Tensor:
            """A generation step: blocked pairs apply once both positions exist."""
            blocked = tuple(pair for pair in options.blocked if max(pair) < seq.size(1))
            return model(seq, self._self_mask(seq, options.causal_for("decoder"), blocked))

        steps: list[DecodeStep] = []
        if target is None:
            steps = self._generate(prompt, forward, model.cfg.max_len - len(prompt))
            answer = self._answer(steps)
        else:
            answer = toy.encode_target(target)[:-1]
        seq_ids = options.padded(prompt + answer, toy.tokenizer.pad_id, model.cfg.max_len)
        seq = self._tensor(seq_ids)
        blocked = options.blocked  # generated: pairs past what the model wrote under them apply to nothing
        if target is None:
            blocked = tuple(pair for pair in blocked if max(pair) < seq.size(1))
        mask = self._self_mask(seq, options.causal_for("decoder"), blocked)
        log_probs, captured = capture(model, model.hook_points, options.hooks, lambda: model(seq, mask))
        masks = {"decoder.attn": mask[0, 0]}
        return self._trace(text, seq, [], masks, captured, log_probs[0], target, len(prompt) - 1, options, steps)

    # -- shared --------------------------------------------------------------------------------
    def _answer(self, steps: list[DecodeStep]) -> list[int]:
        """The generated ids the traced pass reads: all of them but a final </s>."""
        ids = [step.token_id for step in steps]
        return ids[:-1] if ids and ids[-1] == self.toy.tokenizer.eos_id else ids

    def _generate(
        self, prefix: list[int], forward: Callable[[torch.Tensor], torch.Tensor], max_new: int
    ) -> list[DecodeStep]:
        """Greedy decoding one token at a time, capturing the new token's attention at each step.
        forward: ids (1, len) -> log-probabilities (1, len, vocab)."""
        model, eos = self.toy.model, self.toy.tokenizer.eos_id
        ids, steps = list(prefix), []
        for _ in range(max_new):
            seq = self._tensor(ids)
            log_probs, captured = capture(model, model.hook_points, DECODER_PATTERNS, partial(forward, seq))
            next_id = int(log_probs[0, -1].argmax())
            steps.append(DecodeStep(next_id, {k: v[0, :, -1].copy() for k, v in captured.items()}))  # (heads, k_len)
            ids.append(next_id)
            if next_id == eos:
                break
        return steps

    def _trace(
        self,
        text: str,
        source: torch.Tensor,
        target_ids: list[int],
        masks: dict[str, torch.Tensor],
        captured: dict[str, np.ndarray],
        log_probs: torch.Tensor,
        target: str | None,
        first_answer_position: int,
        options: RunOptions,
        steps: list[DecodeStep],
    ) -> Trace:
        """Assemble the Trace. The output is the generated answer (`steps`), or, for a given target, the target
        with each of its tokens scored by the rows of `log_probs` from `first_answer_position` on."""
        tok = self.toy.tokenizer
        predicted = log_probs.argmax(dim=-1)  # (len,)
        source_ids = source[0].tolist()
        outputs = {"log_probs": log_probs.float().cpu().numpy(), "predicted_ids": predicted.cpu().numpy()}
        if target is None:
            output_text = tok.decode([step.token_id for step in steps])
        else:
            expected = self.toy.encode_target(target)  # target + </s>
            rows = log_probs[first_answer_position : first_answer_position + len(expected)]  # (n, vocab)
            outputs |= score_target(rows, expected, tok.tokens)
            output_text = target
        return trace_of_run(
            self.facts, source_ids, target_ids, tok.tokens, masks, captured, outputs=outputs,
            output_text=output_text, options=options, steps=steps, cautions=self.cautions(text),
            output_kind="generated" if target is None else "teacher-forced",
        )


def training_notes(training: dict[str, Any]) -> dict[str, str]:
    """A toy model's training record as a person reads it (the stored keys are the trainer's own; a record read
    from an uploaded folder may lack any of them, or hold other types: those are left out)."""
    steps, best, exact = (training.get(key) for key in ("steps", "best_step", "validation_exact_match"))
    if not isinstance(steps, int):
        return {}
    if training.get("snapshot"):
        return {"training": f"the weights at step {steps:,} of a training run (a snapshot)"}
    how = [f"{name} {training[key]}" for key, name in (("batch_size", "batch"), ("seed", "seed"))
           if isinstance(training.get(key), int)]
    if isinstance(training.get("seconds"), int | float):
        how.append(f"{training['seconds']:.0f} s")
    words = f"{steps:,} steps" + (f" ({', '.join(how)})" if how else "")
    if isinstance(best, int) and best != steps:
        words += f", the best checkpoint at step {best:,}"
    notes = {"training": words}
    if isinstance(exact, int | float):
        notes["exact match on held-out examples"] = f"{exact:.1%}"
    return notes
