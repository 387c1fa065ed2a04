"""Activation patching: which activations carry what tells a clean prompt's answer from a corrupted one's. Each
activation of the clean run is put, one at a time, into the corrupted run, and the logit difference (answer − wrong)
at the last position is read: the residual stream going into each layer, each attention output and each MLP output
at every (layer, position), and each head's output at every position; the same numbers as TransformerLens's
`get_act_patch_resid_pre`, `get_act_patch_attn_out`, `get_act_patch_mlp_out` and
`get_act_patch_attn_head_out_all_pos` with that metric. Patched runs go in batches, each row its own patch
(model/core/capture/patching.py); a stop keeps what is done."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.patching import gradients
from attention_atlas.model.inspect.ablation import TOKENS_PER_PASS
from attention_atlas.model.inspect.attribution import token_id

HOOKS = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
         "head_out": "attn.hook_z"}  # kind -> the hook patched at each layer
KINDS = tuple(HOOKS)


@dataclass(frozen=True)
class Patching:
    """The logit difference (answer − wrong) at the last position in the clean and the corrupted run, and in each
    patched run: `results[kind]` is (layers, positions) for resid_pre, attn_out and mlp_out, (layers, heads) for
    head_out; NaN where a stopped patching did not get to."""

    answer: str
    wrong: str
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    clean: float
    corrupted: float
    results: dict[str, np.ndarray] = field(default_factory=dict)
    estimated: bool = False  # attribution patching's first-order estimates, not patched runs

    def normalised(self, kind: str) -> np.ndarray:
        """results[kind] on the scale 0 = the corrupted run, 1 = the clean run."""
        return (self.results[kind] - self.corrupted) / (self.clean - self.corrupted)

    @property
    def complete(self) -> bool:
        return all(not np.isnan(values).any() for values in self.results.values())

    @property
    def nbytes(self) -> int:
        return sum(values.nbytes for values in self.results.values())


def patching_options() -> RunOptions:
    """What the clean run records: every activation a kind patches in."""
    return RunOptions(hooks=tuple(f"decoder.*.{hook}" for hook in HOOKS.values()))


def patch(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str, kinds: tuple[str, ...] = KINDS,
          tokens_per_pass: int = TOKENS_PER_PASS, progress: Callable[[int, int], None] | None = None,
          stop: threading.Event | None = None) -> Patching:
    """Activation patching of `corrupted_text` with `clean_text`'s activations (`patching_steps`). `progress(done,
    total)` after each batch; `stop` set: the patching ends after the batch under way, keeping what is done."""
    steps = patching_steps(runner, clean_text, corrupted_text, answer, wrong, kinds, tokens_per_pass)
    _, _, found = next(steps)  # filled in place by the steps that follow
    for done, total, _ in steps:
        if progress is not None:
            progress(done, total)
        if stop is not None and stop.is_set():
            break
    return found


def patching_steps(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
                   kinds: tuple[str, ...] = KINDS, tokens_per_pass: int = TOKENS_PER_PASS
                   ) -> Iterator[tuple[int, int, Patching]]:
    """Activation patching of `corrupted_text` with `clean_text`'s activations, of equal token counts, read as the
    logit difference of `answer` over `wrong` (one token each) after the last token, in batches of about
    `tokens_per_pass` tokens (a patched run a row). Yields (patched runs done, of how many, the Patching filled so
    far) before the first batch and after each: a caller that stops iterating keeps what is done."""
    ids, clean, corrupted, found = _prepared(runner, clean_text, corrupted_text, answer, wrong, kinds)
    cells = [(kind, index) for kind, values in found.results.items() for index in np.ndindex(values.shape)]
    batch = max(1, tokens_per_pass // len(clean.ids))
    yield 0, len(cells), found
    for start in range(0, len(cells), batch):
        chunk = cells[start:start + batch]
        rows = [_patch(kind, layer, other) for kind, (layer, other) in chunk]
        values = _differences(runner.patched_outcomes(corrupted, clean.captured, rows).values, ids)
        for (kind, index), value in zip(chunk, values, strict=True):
            found.results[kind][index] = value  # filled in place: what the caller holds grows
        yield start + len(chunk), len(cells), found


def attribution_patching(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str,
                         kinds: tuple[str, ...] = KINDS) -> Patching:
    """Attribution patching (Nanda 2023; Syed et al. 2023): each patched run's logit difference estimated to first
    order from one run of each text and one backward pass of the corrupted one, the corrupted difference plus
    (clean activation − corrupted activation) · the gradient of the difference with respect to that activation, summed
    over its model dimension (a head's: over its positions too). Same shapes and checks as `patching_steps`."""
    ids, clean, corrupted, exact = _prepared(runner, clean_text, corrupted_text, answer, wrong, kinds)
    hooks = {kind: [f"decoder.{layer}.{HOOKS[kind]}" for layer in range(runner.facts.n_decoder_layers)]
             for kind in kinds}
    grads = gradients(runner.model, runner.taps, corrupted, [hook for names in hooks.values() for hook in names],
                      lambda logits: logits[ids[0]] - logits[ids[1]])  # type: ignore[attr-defined]
    results = {}
    for kind, names in hooks.items():
        change = [(clean[name].astype(np.float64) - corrupted[name]) * grads[name] for name in names]
        summed = [c.sum(axis=(1, 2)) if kind == "head_out" else c.sum(axis=-1) for c in change]  # (heads,) or (pos,)
        results[kind] = exact.corrupted + np.stack(summed)
    return Patching(answer, wrong, exact.clean_tokens, exact.corrupted_tokens, exact.clean, exact.corrupted, results,
                    estimated=True)


def _prepared(runner: Runner, clean_text: str, corrupted_text: str, answer: str, wrong: str, kinds: tuple[str, ...]
              ) -> tuple[list[int], Trace, Trace, Patching]:
    """The two tokens' ids, both runs (every activation a kind patches recorded), and a Patching with their logit
    differences and empty results; UserError where the model, the kinds, the answers or the texts do not fit."""
    facts = runner.facts
    if facts.kind != "decoder" or not hasattr(runner, "model"):
        raise UserError(f"{facts.model_id} is {'an' if facts.kind[0] == 'e' else 'a'} {facts.kind}: activation "
                        "patching here reads a causal language model's next token (SmolLM2, or a Hugging Face one).")
    unknown = [kind for kind in kinds if kind not in HOOKS]
    if unknown:
        raise UserError(f"Unknown patching {', '.join(unknown)}: choose among {', '.join(KINDS)}.")
    ids = [token_id(runner, answer, "answer"), token_id(runner, wrong, "wrong answer")]
    clean = runner.run(clean_text, None, patching_options())
    corrupted = runner.run(corrupted_text, None, patching_options())
    if len(clean.ids) != len(corrupted.ids):
        raise UserError(f"The clean and the corrupted text must have as many tokens: the clean one has "
                        f"{len(clean.ids)} ({_spelled(clean)}), the corrupted one {len(corrupted.ids)} "
                        f"({_spelled(corrupted)}).")
    corrupted_difference = _differences(runner.patched_outcomes(corrupted, {}, [None]).values, ids)[0]
    clean_difference = _differences(runner.patched_outcomes(clean, {}, [None]).values, ids)[0]
    layers, length, heads = facts.n_decoder_layers, len(clean.ids), facts.n_heads
    empty = {kind: np.full((layers, heads if kind == "head_out" else length), np.nan) for kind in kinds}
    return ids, clean, corrupted, Patching(answer, wrong, clean.tokens, corrupted.tokens, float(clean_difference),
                                           float(corrupted_difference), empty)


def _patch(kind: str, layer: int, other: int) -> Patch:
    hook = f"decoder.{layer}.{HOOKS[kind]}"
    return Patch(hook, head=other) if kind == "head_out" else Patch(hook, position=other)


def _differences(log_probs: np.ndarray, ids: list[int]) -> np.ndarray:
    """(rows,) the logit difference after the last token: a difference of log-probabilities is one of logits."""
    last = log_probs[:, -1].astype(np.float64)  # (rows, vocab)
    return last[:, ids[0]] - last[:, ids[1]]


def _spelled(trace: Trace) -> str:
    return " | ".join(repr(token) for token in trace.tokens)
