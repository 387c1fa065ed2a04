"""Activation patching: which activations carry what tells a clean prompt's answer from a corrupted one's. Each
activation of the clean run is put, one at a time, into the corrupted run, and the logit difference (answer − wrong)
after one position of the decoder's sequence (its last, unless chosen) is read: the residual stream going into each
layer, each attention output and each MLP output at every (layer, position), and each head's output at every
position; for a causal LM the same numbers as TransformerLens's `get_act_patch_resid_pre`, `get_act_patch_attn_out`,
`get_act_patch_mlp_out` and `get_act_patch_attn_head_out_all_pos` with that metric. In an encoder-decoder the two
texts are sources: those kinds patch the encoder, which reads them, and `cross_head_out` each decoder
cross-attention head, which brings them to the output; both runs read the same output (given, or the clean run's
own). Patched runs go in batches, each row its own patch (model/core/capture/patching.py); a stop keeps what is
done."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attention_atlas.model.core.capture.ablation import Outcome
from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.attribution import token_id
from attention_atlas.model.inspect.offered import offered_hooks

HOOKS = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
         "head_out": "attn.hook_z", "cross_head_out": "cross_attn.hook_z"}  # kind -> the hook patched at each layer
KINDS = ("resid_pre", "attn_out", "mlp_out", "head_out")  # every model's; an encoder-decoder's also cross_head_out
HEAD_KINDS = ("head_out", "cross_head_out")  # (layers, heads), each head at every position
LEAST_DIFFERENCE = 1e-3  # the clean and the corrupted logit differences must be this far apart: nothing to restore
# otherwise (patching a text into itself), and a share restored would divide by about 0
MAX_PATCH_WORK = 100_000  # tokens the patched runs of one patching may read in all on the app's shared server: SmolLM2
# patched at every kind on a 30-token text, about 2 minutes on a 2-core CPU (docs/attribution.md)


@dataclass(frozen=True)
class Patching:
    """The logit difference (answer − wrong) after `position` in the clean and the corrupted run, and in each patched
    run: `results[kind]` is (layers, positions of the texts) for resid_pre, attn_out and mlp_out, (layers, heads) for
    head_out and cross_head_out; NaN where a stopped patching did not get to."""

    answer: str
    wrong: str
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    clean: float
    corrupted: float
    results: dict[str, np.ndarray] = field(default_factory=dict)
    estimated: bool = False  # attribution patching's first-order estimates, not patched runs
    position: int = -1  # of the decoder's sequence: the prediction read is the one after it
    output: str | None = None  # the output both runs read (teacher forcing); None: the texts alone

    def normalised(self, kind: str) -> np.ndarray:
        """results[kind] on the scale 0 = the corrupted run, 1 = the clean run; UserError where the two runs are
        within LEAST_DIFFERENCE (`refuse_no_difference`)."""
        refuse_no_difference(self.answer, self.wrong, self.clean, self.corrupted)
        return (self.results[kind] - self.corrupted) / (self.clean - self.corrupted)

    def as_dict(self) -> dict[str, Any]:
        """Every field, and each kind normalised, arrays as nested lists (JSON; NaN where not patched: None)."""
        def listed(values: np.ndarray) -> list:
            return np.where(np.isnan(values), None, values).tolist()

        return ({name: value for name, value in vars(self).items() if name != "results"}
                | {"results": {kind: listed(values) for kind, values in self.results.items()},
                   "normalised": {kind: listed(self.normalised(kind)) for kind in self.results}})

    @property
    def complete(self) -> bool:
        return all(not np.isnan(values).any() for values in self.results.values())

    @property
    def nbytes(self) -> int:
        return sum(values.nbytes for values in self.results.values())


def refuse_no_difference(answer: str, wrong: str, clean: float, corrupted: float) -> None:
    """UserError where the clean and the corrupted logit differences are within LEAST_DIFFERENCE: no share of the
    clean run can be restored."""
    if not abs(clean - corrupted) >= LEAST_DIFFERENCE:  # NaN too
        raise UserError(f"The clean and the corrupted text give the same logit difference {answer!r} − {wrong!r} "
                        f"({clean:+.4f} and {corrupted:+.4f}): patching has nothing to restore. Choose a corrupted "
                        "text that changes the answer (the names swapped, another number).")


def kinds_of(runner: Runner) -> tuple[str, ...]:
    """What can be patched in this model: those of KINDS (and an encoder-decoder's cross-attention heads) whose hook
    every layer offers (model/inspect/offered.py): blocks that add attention's output scaled (Granite 4's) or beside
    Mamba's (Falcon-H1's) offer no hook_attn_out, an attention block without an MLP (Nemotron-H's) no hook_mlp_out."""
    kinds = (*KINDS, "cross_head_out") if runner.facts.kind == "encoder-decoder" else KINDS
    offered = offered_hooks(runner)
    return tuple(kind for kind in kinds if all(hook in offered for hook in patched_hooks(runner, kind)))


def read_output(trace: Trace) -> str | None:
    """The output a patching of `trace`'s text reads after it: the target it was given, or its own where its run holds
    it (an encoder-decoder's, a toy GPT's); None where the run is the text alone (a Hugging Face causal LM's)."""
    if trace.target is not None:
        return trace.target
    return trace.output_text if trace.target_ids or trace.steps else None


def patched_hooks(runner: Runner, kind: str) -> list[str]:
    """The hook patched at each layer for `kind`: in the stack that reads the texts (an encoder-decoder's encoder),
    cross_head_out in the decoder."""
    facts = runner.facts
    if kind == "cross_head_out" or facts.kind != "encoder-decoder":
        return [f"decoder.{layer}.{HOOKS[kind]}" for layer in range(facts.n_decoder_layers)]
    return [f"encoder.{layer}.{HOOKS[kind]}" for layer in range(facts.n_encoder_layers)]


def patching_options(runner: Runner, kinds: tuple[str, ...]) -> RunOptions:
    """What the clean run records: every activation a kind patches in."""
    return RunOptions(hooks=tuple(hook for kind in kinds for hook in patched_hooks(runner, kind)))


@dataclass(frozen=True)
class PatchingRuns:
    """A patching's two runs, made once for its estimate and its patched runs (`prepare_patching`)."""

    read: Callable[[Outcome], np.ndarray]  # an outcome's rows -> (rows,) the logit difference after the position
    clean: Trace  # every activation a kind patches recorded
    corrupted: Trace
    empty: Patching  # both runs' logit differences, the results NaN

    def cells(self) -> list[tuple[str, tuple[int, ...]]]:
        """(kind, index into its results) of every patched run, in order."""
        return [(kind, index) for kind, values in self.empty.results.items() for index in np.ndindex(values.shape)]

    @property
    def tokens_per_run(self) -> int:
        return len(self.clean.ids) + len(self.clean.target_ids)

    @property
    def work(self) -> int:
        """Tokens the patched runs read in all (compare MAX_PATCH_WORK): a run a cell, each of the whole text."""
        return sum(values.size for values in self.empty.results.values()) * self.tokens_per_run

    def fresh(self) -> Patching:
        """The empty Patching, with results of its own to fill."""
        return replace(self.empty, results={kind: values.copy() for kind, values in self.empty.results.items()})


def patch(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
          kinds: tuple[str, ...] | None = None, *, target: str | None = None, position: int = -1,
          tokens_per_pass: int = TOKENS_PER_PASS, progress: Callable[[int, int], None] | None = None,
          stop: threading.Event | None = None) -> Patching:
    """Activation patching of `corrupted_text` with `clean_text`'s activations (`prepare_patching`, `patching_steps`;
    no limit on its work). `progress(done, total)` after each batch; `stop` set: the patching ends after the batch
    under way, keeping what is done."""
    steps = patching_steps(runner, prepare_patching(runner, clean_text, corrupted_text, answer, wrong, kinds,
                                                    target=target, position=position), tokens_per_pass)
    _, _, found = next(steps)  # filled in place by the steps that follow
    for done, total, _ in steps:
        if progress is not None:
            progress(done, total)
        if stop is not None and stop.is_set():
            break
    return found


def patching_steps(runner: Runner, runs: PatchingRuns, tokens_per_pass: int = TOKENS_PER_PASS,
                   max_work: int | None = None, slot: Callable[[], AbstractContextManager] = nullcontext
                   ) -> Iterator[tuple[int, int, Patching]]:
    """The patched runs of `runs`, in batches of about `tokens_per_pass` tokens (a patched run a row), each batch
    computed within its own `slot()` (the app's run slots: other runs take turns between batches). Yields (patched
    runs done, of how many, the Patching filled so far) before the first batch and after each, the slot let go: a
    caller that stops iterating keeps what is done. UserError, before any run, where `runs.work` is over `max_work`
    (None: no limit)."""
    if max_work is not None and runs.work > max_work:
        cells = len(runs.cells())
        raise UserError(f"Patching these kinds runs the model {cells:,} times over {runs.tokens_per_run:,} tokens "
                        f"each ({runs.work:,} tokens); the limit here is {max_work:,}. Patch fewer kinds or a "
                        "shorter text.")
    found, cells = runs.fresh(), runs.cells()
    batch = max(1, tokens_per_pass // runs.tokens_per_run)
    yield 0, len(cells), found
    for start in range(0, len(cells), batch):
        chunk = cells[start:start + batch]
        rows = [_patch(runner, kind, layer, other) for kind, (layer, other) in chunk]
        with slot():
            values = runs.read(runner.patched_outcomes(runs.corrupted, runs.clean.captured, rows))
        for (kind, index), value in zip(chunk, values, strict=True):
            found.results[kind][index] = value  # filled in place: what the caller holds grows
        yield start + len(chunk), len(cells), found


def attribution_patching(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
                         kinds: tuple[str, ...] | None = None, *, target: str | None = None,
                         position: int = -1) -> Patching:
    """Attribution patching's estimate (`estimate_patching`) of the patching `prepare_patching` prepares."""
    return estimate_patching(runner, prepare_patching(runner, clean_text, corrupted_text, answer, wrong, kinds,
                                                      target=target, position=position))


def estimate_patching(runner: Runner, runs: PatchingRuns) -> Patching:
    """Attribution patching (Nanda 2023; Syed et al. 2023): each patched run's logit difference estimated to first
    order from the two runs and one backward pass of the corrupted one, the corrupted difference plus (clean
    activation − corrupted activation) · the gradient of the difference with respect to that activation, summed over
    its model dimension (a head's: over its positions too). The shapes of `patching_steps`'s."""
    empty, clean, corrupted = runs.empty, runs.clean, runs.corrupted
    hooks = {kind: patched_hooks(runner, kind) for kind in empty.results}
    a, b = (token_id(runner, word, what) for word, what in ((empty.answer, "answer"), (empty.wrong, "wrong answer")))
    grads = runner.gradients(corrupted, [hook for names in hooks.values() for hook in names], empty.position,
                             lambda logits: logits[a] - logits[b])
    results = {}
    for kind, names in hooks.items():
        change = [(clean[name].astype(np.float64) - corrupted[name]) * grads[name] for name in names]
        summed = [c.sum(axis=(1, 2)) if kind in HEAD_KINDS else c.sum(axis=-1) for c in change]  # (heads,) or (pos,)
        results[kind] = empty.corrupted + np.stack(summed)
    return replace(empty, results=results, estimated=True)


def prepare_patching(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
                     kinds: tuple[str, ...] | None = None, *, target: str | None = None,
                     position: int = -1) -> PatchingRuns:
    """Both runs of a patching of `corrupted_text` with `clean_text`'s activations, of equal token counts, read as the
    logit difference of `answer` over `wrong` (one token each) after `position` of the decoder's sequence, both runs
    reading `target` (an encoder-decoder's or a toy's output; None: the clean run's own), of `kinds` (None: every kind
    of the model); UserError where the model, the kinds, the answers, the texts or the position do not fit, or the
    two runs give the same logit difference (`refuse_no_difference`)."""
    facts = runner.facts
    if facts.kind == "encoder":
        raise UserError(f"{facts.model_id} is an encoder: it predicts no next token, so there is no logit "
                        "difference to patch. Choose a causal language model or an encoder-decoder.")
    kinds = kinds_of(runner) if kinds is None else kinds
    unknown = [kind for kind in kinds if kind not in kinds_of(runner)]
    if unknown:
        raise UserError(f"{facts.model_id} has no {', '.join(unknown)} to patch: choose among "
                        f"{', '.join(kinds_of(runner))}.")
    ids = [token_id(runner, answer, "answer"), token_id(runner, wrong, "wrong answer")]
    options = patching_options(runner, kinds)
    clean = runner.run(clean_text, target, options)
    if target is None and read_output(clean) is not None:  # its own output is part of its run: the corrupted run
        target = read_output(clean)  # reads it too
        clean = runner.run(clean_text, target, options)
    corrupted = runner.run(corrupted_text, target, options)
    if len(clean.ids) != len(corrupted.ids):
        raise UserError(f"The clean and the corrupted text must have as many tokens: the clean one has "
                        f"{len(clean.ids)} ({_spelled(clean)}), the corrupted one {len(corrupted.ids)} "
                        f"({_spelled(corrupted)}).")
    sequence = len(clean.target_ids) if facts.kind == "encoder-decoder" else len(clean.ids)
    p = position % sequence if -sequence <= position < sequence else position
    outcome = runner.patched_outcomes(clean, {}, [None])
    if p not in outcome.positions:
        first, last = outcome.positions[0], outcome.positions[-1]
        raise UserError(f"Patching reads the prediction after token {first}" + (f" to {last}" if last != first else "")
                        + f" of this model's runs, not after token {position}"
                        + (": end the text where the prediction is." if last == first else "."))

    def read(found: Outcome) -> np.ndarray:
        """(rows,) the logit difference after p: a difference of log-probabilities is one of logits."""
        chosen = found.values[:, found.positions.index(p)].astype(np.float64)  # (rows, vocab)
        return chosen[:, ids[0]] - chosen[:, ids[1]]

    clean_difference, corrupted_difference = read(outcome)[0], read(runner.patched_outcomes(corrupted, {}, [None]))[0]
    refuse_no_difference(answer, wrong, float(clean_difference), float(corrupted_difference))
    layers = {kind: len(patched_hooks(runner, kind)) for kind in kinds}
    empty = {kind: np.full((layers[kind], facts.n_heads if kind in HEAD_KINDS else len(clean.ids)), np.nan)
             for kind in kinds}
    return PatchingRuns(read, clean, corrupted, Patching(answer, wrong, clean.tokens, corrupted.tokens,
                                                         float(clean_difference), float(corrupted_difference), empty,
                                                         position=p, output=target))


def _patch(runner: Runner, kind: str, layer: int, other: int) -> Patch:
    hook = patched_hooks(runner, kind)[layer]
    return Patch(hook, head=other) if kind in HEAD_KINDS else Patch(hook, position=other)


def _spelled(trace: Trace) -> str:
    return " | ".join(repr(token) for token in trace.tokens)
