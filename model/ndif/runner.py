"""A model NDIF hosts, run as the app runs a local one: each run one nnsight request (model/ndif/request.py), its
trace made here by the local capture from what came back (model/ndif/wire.py), with the names and meaning of a local
run's hooks.

What a run on NDIF does: the hooks the twin carried (model/ndif/twin.py), patterns and their summary (the app's
frame: summarised on NDIF, each layer's queries and keys fetched when a view opens it, model/ndif/fetched.py), ablated
heads (their output edited where attention computes it, on NDIF), the greedy continuation by nnsight's `generate` in
the same request, or a given target scored; a batch of runs each with its own heads ablated (the Ablation page's
outcomes); generation a token at a time (model/ndif/stepper.py); activation patching and gradients
(model/ndif/patches.py).
What it refuses, each with a sentence: masks other than the model's own (the causal what-ifs, blocked pairs, padding),
a batch past MAX_ROWS ablated runs (the scan of every head).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.capture.ablation import Outcome
from attention_atlas.model.core.capture.hooks import ModuleTap, ReportedTap
from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.generation.forcing import score_target
from attention_atlas.model.core.masks import self_attention_mask
from attention_atlas.model.core.options import AblationMode, Head, RunOptions
from attention_atlas.model.core.runner import trace_of_run
from attention_atlas.model.core.text_checks import validate_text
from attention_atlas.model.core.trace.facts import ModelFacts, OutputKind
from attention_atlas.model.core.trace.kept_masks import sharing_site_masks
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.examples import EXAMPLES
from attention_atlas.model.hf.facts import SOURCE_BYTES_LIMIT
from attention_atlas.model.hf.taps import Family
from attention_atlas.model.hf.text import TokenText
from attention_atlas.model.ndif.fetched import KEPT_BYTES, FetchedSource, Fetcher
from attention_atlas.model.ndif.patches import gradient_ask, gradients_by_hook, patch_steps
from attention_atlas.model.ndif.request import TIMEOUT_S, Answer, Ask, current_key, send
from attention_atlas.model.ndif.stepper import ndif_stepper
from attention_atlas.model.ndif.summaries import site_summary, summariser, wire_layout
from attention_atlas.model.ndif.transfer import Ledger, Transfer, record, wire_bytes
from attention_atlas.model.ndif.twin import Probe
from attention_atlas.model.ndif.wire import Plan, fetch_plan, plan, replay, row_edits

MAX_TEXT_CHARS = 100_000  # before tokenising, as a local Hugging Face run (model/hf/runner.py)
CONTINUATION_TOKENS = 8  # the greedy continuation a run shows, as a local run's
CONTINUATION_MAX_PROMPT = 512  # longer prompts show the next token only, as a local run's
TOP_K = 10
MAX_ROWS = 64  # ablated runs one request reads in its batch
MASKS_REFUSED = ("NDIF runs the model under the mask it was trained with: the causal what-ifs, blocked pairs and "
                 "padding run on a model loaded here (Device: auto or cpu).")
NOT_HERE = "{what} is not offered on NDIF here: {why} Load the model here (Device: auto) for it."
PRIVACY = ("This text leaves this machine: NDIF's servers read it and run the model on it (nnsight's remote "
           "execution). Type nothing you would not send to them.")


@dataclass(frozen=True)
class Hosted:
    """What a runner on NDIF holds: the model as nnsight addresses it, its modules (on the meta device where it is
    sent) by path, its hooks, and what its twin showed."""

    model: Any  # nnsight's TransformersModel: dispatched here when simulated
    taps: dict[str, ModuleTap | ReportedTap]  # hook name -> tap on the model's own modules
    paths: dict[nn.Module, str]  # module -> its path, as the request names it
    probe: Probe
    shapes: tuple[int, int, int]  # (heads, kv_heads, d_head) of each attention layer
    simulate: bool
    timeout_s: float = TIMEOUT_S


class NDIFRunner:
    """A model on NDIF (or simulated here), with the Runner interface of model/core/runner.py."""

    weights_here = False  # its weights stay on NDIF: views that read them (Step through, Why here?, …) say so

    def __init__(self, hosted: Hosted, facts: ModelFacts, family: Family, tokenizer: Any) -> None:
        self.hosted, self.facts, self.family = hosted, facts, family
        self.taps = hosted.taps
        self._one_request = threading.Lock()  # nnsight's model object runs one trace at a time (sessions share it)
        self.examples = EXAMPLES["decoder"]
        self.text = TokenText(tokenizer, facts.model_id, facts.max_len)

    @property
    def max_tokens(self) -> int:
        return self.facts.max_len

    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        validate_text(text, MAX_TEXT_CHARS)
        if target is not None:
            validate_text(target, MAX_TEXT_CHARS, what="target")
        if not options.trained_masks or options.pad_to or options.causal == "off":
            raise UserError(MASKS_REFUSED)
        ids = self.text.encode(text)
        target_ids = self.text.encode_continuation(target, len(ids)) if target is not None else []
        sequence = ids + target_ids
        allowed = self_attention_mask(len(sequence), len(sequence), True)  # (1, 1, len, len)
        hosted = self.hosted
        chosen = plan(hosted.taps, hosted.paths, hosted.probe, options, self.facts.n_heads)
        generate = CONTINUATION_TOKENS if target is None and len(ids) <= CONTINUATION_MAX_PROMPT else 0
        _check_size(chosen, hosted.shapes, len(sequence))
        made = summariser(self.facts.n_heads, sequence) if chosen.fetched else None
        ask = Ask(sequence, chosen.steps, chosen.edits, len(ids) - 1, generate, self.text.pad_id(),
                  layout=None if made is None else wire_layout(made.layout))
        answer = self._send(ask)
        captured = replay(hosted.taps, hosted.paths, hosted.probe, chosen, answer.found, options, allowed,
                          self.facts.n_heads, {"decoder": sequence})
        if made is not None:  # every layer summarised on NDIF: the site's summary from its sums
            reduced = [found for (_, part), found in zip(chosen.steps, answer.found, strict=True) if part == "summary"]
            captured[Site.of_pattern(next(iter(chosen.fetched)))[0].name] = site_summary(made, reduced)
        logits = answer.logits[0].float()  # (len(sequence) - len(ids) + 1, vocab)
        outputs = _top_next(logits[-1], self.text)
        output_text, kind = self._output(target, target_ids, logits, outputs, answer.generated)
        if target is not None:
            outputs |= score_target(logits[:-1], target_ids, self.text.tokens)
        trace = trace_of_run(self.facts, sequence, [], self.text.tokens, {"decoder.attn": allowed[0, 0]}, captured,
                             outputs=outputs, output_text=output_text, options=options, output_kind=kind)
        ledger = Ledger(answer.transfer)
        layer = wire_bytes(1, *hosted.shapes, len(sequence), number_bytes=4)  # one layer's, kept here
        fetcher = Fetcher(self._fetcher(chosen, sequence, options, allowed, trace.masks), ledger,
                          max(1, KEPT_BYTES // layer), layer)
        shape = (self.facts.n_heads, len(sequence), len(sequence))
        fetched = {name: FetchedSource(shape, name, fetcher) for name in chosen.fetched}
        trace = replace(trace, text=text, target=target, pattern_sources={**trace.pattern_sources, **fetched})
        record(trace, ledger)
        return trace

    def _fetcher(self, chosen: Plan, sequence: list[int], options: RunOptions, allowed: torch.Tensor,
                 masks: dict[str, np.ndarray]) -> Callable[[str], tuple[PatternSource, Transfer]]:
        """How a layer of a run summarised on NDIF is fetched: a request for its queries and keys (`fetch_plan`)
        under the run's edits, sent with the key of the thread that reads it, made the layer's pattern source here.
        Holds this runner weakly (a trace kept in a cache does not keep its model loaded) and no key."""
        runner, hosted = weakref.ref(self), self.hosted

        def fetch(name: str) -> tuple[PatternSource, Transfer]:
            self = runner()
            if self is None:
                raise UserError("The model of this run has been let go since: run it again to open this layer.")
            one = fetch_plan(chosen, name, hosted.probe)
            answer = self._send(Ask(sequence, one.steps, one.edits, len(sequence), 0))
            captured = replay(hosted.taps, hosted.paths, hosted.probe, one, answer.found,
                              replace(options, summarised=False), allowed, self.facts.n_heads, {"decoder": sequence})
            source = captured[name][0]
            return sharing_site_masks({name: source}, masks)[name], answer.transfer

        return fetch

    def _send(self, ask: Ask) -> Answer:
        """One request, with this thread's key where it is sent; one at a time on this model."""
        hosted = self.hosted
        key = None if hosted.simulate else current_key()
        with self._one_request:
            return send(hosted.model, ask, hosted.simulate, key, hosted.timeout_s)

    def _output(self, target: str | None, target_ids: list[int], logits: torch.Tensor,
                outputs: dict[str, np.ndarray], generated: list[int]) -> tuple[str, OutputKind]:
        """The run's output text and kind, as a local run's: the target, the greedy continuation, or the next token
        after a prompt too long to continue."""
        if target is not None:
            return target, "teacher-forced"
        if generated:
            return self.text.decode(generated), "generated"
        return self.text.decode([int(outputs["top_next_ids"][0])]), "next token"

    def cautions(self, text: str) -> tuple[str, ...]:
        return () if self.hosted.simulate else (PRIVACY,)

    def stepper(self, text: str, options: RunOptions) -> Stepper:
        """Generation a token at a time (model/ndif/stepper.py), under the model's own masks."""
        if not options.trained_masks:
            raise UserError(MASKS_REFUSED)
        return ndif_stepper(self, text)

    def passes_sender(self, paths: list[str]) -> Callable[[list[int], int], list[Any]]:
        """send(ids, tokens): a request that generates `tokens` greedy tokens after `ids`, reading at each pass the
        last query's attention row at the attention modules `paths` (remote.step_rows)."""

        def send(ids: list[int], tokens: int) -> list[Any]:
            return self._send(Ask(ids, [], {}, len(ids), tokens, self.text.pad_id(), passes=paths)).passes

        return send

    def ablation_outcomes(self, trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome:
        """The next-token log-probabilities after `trace`'s text, once per row of `rows` (its heads ablated), in one
        request of one batch; UserError past MAX_ROWS rows (a scan of every head)."""
        if len(rows) > MAX_ROWS:
            raise UserError(NOT_HERE.format(what=f"A batch of {len(rows):,} ablated runs", why=f"a request reads "
                                            f"{MAX_ROWS} at most. Ablate the heads you choose (Ablation page)."))
        self._check_read_as_typed(trace)
        hosted = self.hosted
        chosen = row_edits(hosted.taps, hosted.paths, hosted.probe, rows, mode, self.facts.n_heads)
        ask = Ask(trace.ids, chosen.steps, chosen.edits, len(trace.ids) - 1, 0, rows=len(rows))
        logits = self._send(ask).logits  # (rows, 1, vocab)
        return Outcome("distributions", logits.float().log_softmax(-1).numpy(), (len(trace.ids) - 1,))

    def patched_outcomes(self, trace: Trace, clean: dict[str, np.ndarray], rows: Sequence[Patch | None]) -> Outcome:
        """The next-token log-probabilities after `trace`'s text (the corrupted one), once per row of `rows` (the
        clean run's activation patched in, or None): MAX_ROWS rows a request (model/ndif/patches.py)."""
        self._check_read_as_typed(trace)
        hosted, found = self.hosted, []
        for start in range(0, len(rows), MAX_ROWS):
            chunk = rows[start : start + MAX_ROWS]
            patches = patch_steps(hosted.taps, hosted.paths, hosted.probe, chunk, clean)
            ask = Ask(trace.ids, [], {}, len(trace.ids) - 1, 0, rows=len(chunk), patches=patches)
            found.append(self._send(ask).logits)  # (rows, 1, vocab)
        return Outcome("distributions", torch.cat(found).float().log_softmax(-1).numpy(), (len(trace.ids) - 1,))

    def gradients(self, trace: Trace, hooks: Sequence[str], position: int,
                  metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
        """The gradient of `metric(the logits after `position`)` with respect to each hook's value in a run of
        `trace`'s text, in one forward and backward pass on NDIF (model/ndif/patches.py)."""
        self._check_read_as_typed(trace)
        if position != len(trace.ids) - 1:
            raise UserError(f"This model's runs here read the prediction after token {len(trace.ids) - 1}, not "
                            f"{position}.")
        hosted = self.hosted
        asked = gradient_ask(hosted.taps, hosted.paths, hosted.probe, hooks, position, metric)
        found = self._send(Ask(trace.ids, [], {}, len(trace.ids), 0, gradient=asked)).found
        return gradients_by_hook(hosted.taps, hosted.paths, hooks, asked[0], found)

    @staticmethod
    def _check_read_as_typed(trace: Trace) -> None:
        if not trace.options.trained_masks or trace.options.pad_to:
            raise UserError(MASKS_REFUSED)


def _check_size(chosen: Plan, shapes: tuple[int, int, int], tokens: int) -> None:
    """UserError for a run that would bring back more queries and keys (and values) than a run keeps here
    (SOURCE_BYTES_LIMIT, float32 as they are kept), before anything is sent."""
    kept = sum(wire_bytes(1, *shapes, tokens, number_bytes=4, values=part == "attention+values")
               for _, part in chosen.steps if part.startswith("attention"))
    if kept > SOURCE_BYTES_LIMIT:
        raise UserError(f"This run would bring back {kept / 2**30:.1f} GiB of queries and keys from NDIF, more "
                        f"than the {SOURCE_BYTES_LIMIT / 2**30:.0f} GiB a run keeps here: ask for fewer layers, or a "
                        "shorter text (the views of every layer read a summary made on NDIF).")


def _top_next(logits: torch.Tensor, text: TokenText) -> dict[str, np.ndarray]:
    """The TOP_K likeliest next tokens from one position's logits (vocab,), as a local run reports them."""
    top = logits.float().softmax(-1).topk(TOP_K)
    top_ids = top.indices.tolist()
    return {"top_next_ids": np.array(top_ids), "top_next_probs": top.values.numpy(),
            "top_next_tokens": np.array(text.tokens(top_ids), dtype=str)}
