"""The Generate page's state in the session: the generated tokens and, per step, what the model did (model
steps as model/core/generation/decoding.py makes them, attention rows kept as float16: `compact`). It belongs to one
model, text, causal choice and set of decoding settings, and is dropped when any of them changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Step, Stepper, generate
from attention_atlas.model.core.generation.sampling import DecodeSettings, choose_next
from attention_atlas.plot.generating import compact

STATE = "generate_state"  # session key of the Generation
MAX_CONTEXT_TOKENS = 1024  # longest prompt (or source) generated from: each step keeps a row per layer and head


@dataclass
class Generation:
    """One generation so far. Plain values only: the stepper (which holds the model) is made per call."""

    key: tuple  # (model id, device, text, causal choice, settings) it was made for
    context_tokens: list[str]  # the decoder's context before the first generated token
    source_tokens: list[str]  # what the encoder reads (empty: a causal LM)
    ids: list[int] = field(default_factory=list)  # generated ids
    tokens: list[str] = field(default_factory=list)  # their strings
    how: list[str] = field(default_factory=list)  # per token: "greedy", "sampled" or "forced"
    steps: list[Step] = field(default_factory=list)  # float16 rows
    alternatives: list[list[str]] = field(default_factory=list)  # per step: its top tokens' strings
    text: str = ""  # the generated ids decoded (special tokens left out)
    stopped: str = ""  # why it can go no further ("" while it can)


def current(key: tuple) -> Generation | None:
    """The session's generation if it was made for `key`; a stale one is dropped."""
    generation = st.session_state.get(STATE)
    if generation is not None and generation.key != key:
        del st.session_state[STATE]
        return None
    return generation


def reset() -> None:
    st.session_state.pop(STATE, None)


def context_problem(stepper: Stepper) -> str | None:
    """Why this page cannot generate from the stepper's context (a text or source too long), or None."""
    for what, ids in (("text", stepper.context), ("source", stepper.source)):
        if len(ids) > MAX_CONTEXT_TOKENS:
            return (f"The {what} is {len(ids):,} tokens long; this page generates from at most "
                    f"{MAX_CONTEXT_TOKENS:,}. Shorten it.")
    return None


def start(key: tuple, stepper: Stepper) -> Generation:
    """A new, empty generation kept in the session. ValueError for a context too long to generate from."""
    problem = context_problem(stepper)
    if problem is not None:
        raise UserError(problem)
    generation = Generation(key, stepper.tokens(stepper.context), stepper.tokens(stepper.source))
    st.session_state[STATE] = generation
    return generation


def extend(generation: Generation, stepper: Stepper, settings: DecodeSettings, n: int,
           progress: Callable[[int], None] = lambda done: None) -> None:
    """Up to `n` more tokens (never past settings.max_new), calling progress(done) after each."""
    n = min(n, settings.max_new - len(generation.ids))

    def choose(logits, index: int) -> int:
        return choose_next(logits, settings, index)

    for done, step in enumerate(generate(stepper, generation.ids, n, choose), start=1):
        _append(generation, stepper, compact(step), "greedy" if settings.is_greedy else "sampled")
        progress(done)
    _note_stop(generation, stepper, settings)


def force(generation: Generation, stepper: Stepper, settings: DecodeSettings, index: int, token_id: int) -> None:
    """Step `index` takes `token_id` instead; the steps after it are made again from there (as many as before)."""
    later = len(generation.ids) - index - 1
    step = replace(generation.steps[index], token_id=token_id,
                   probability=_probability(generation.steps[index], token_id))
    for name in ("ids", "tokens", "how", "steps", "alternatives"):
        setattr(generation, name, getattr(generation, name)[:index])
    _append(generation, stepper, step, "forced")
    generation.stopped = ""
    extend(generation, stepper, settings, later)


def _probability(step: Step, token_id: int) -> float:
    hits = np.flatnonzero(step.top_ids == token_id)
    return float(step.top_probs[hits[0]]) if hits.size else float("nan")


def _append(generation: Generation, stepper: Stepper, step: Step, how: str) -> None:
    generation.ids.append(step.token_id)
    generation.tokens.extend(stepper.tokens([step.token_id]))
    generation.how.append(how)
    generation.steps.append(step)
    generation.alternatives.append(stepper.tokens(step.top_ids.tolist()))
    generation.text = stepper.decode(generation.ids)


def _note_stop(generation: Generation, stepper: Stepper, settings: DecodeSettings) -> None:
    if generation.ids and generation.ids[-1] in stepper.eos_ids:
        generation.stopped = "The model wrote its end token."
    elif len(generation.ids) >= settings.max_new:
        generation.stopped = f"Reached the limit of {settings.max_new} new tokens."
    elif len(stepper.context) + len(generation.ids) >= stepper.max_context:
        generation.stopped = f"The context is full ({stepper.max_context:,} tokens, the model's longest)."
