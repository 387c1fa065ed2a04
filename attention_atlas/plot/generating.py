"""The Generate page's figures: the attention of the query that chose a generated token, over its whole context (and
over the source, for encoder-decoders), per layer (the mean over heads) or per head of one layer. The page keeps each
step's rows as float16 (`compact`); `generation` generates the same way, so its figures are the page's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import numpy as np
import plotly.graph_objects as go

from attention_atlas.api import Model
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Step, generate
from attention_atlas.model.core.generation.sampling import DecodeSettings, choose_next
from attention_atlas.model.core.options import CausalMode, RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.plot.common import check_index, runner_of
from attention_atlas.viz.generation import rows_heatmap

Kind = Literal["self", "cross"]


def compact(step: Step) -> Step:
    """The step as the Generate page keeps it: attention rows as float16 (half the memory)."""
    cross = None if step.cross_rows is None else step.cross_rows.astype(np.float16)
    return replace(step, self_rows=step.self_rows.astype(np.float16), cross_rows=cross)


def step_kinds(step: Step) -> list[Kind]:
    """The attentions a step has rows of: "self", and "cross" for an encoder-decoder."""
    return ["self"] if step.cross_rows is None else ["self", "cross"]


def layer_means(rows: np.ndarray) -> np.ndarray:
    """(layers, heads, keys) rows -> (layers, keys) float32, the mean over heads."""
    return rows.astype(np.float32).mean(axis=1)


def step_figure(step: Step, index: int, context: list[str], source: list[str], kind: Kind = "self",
                layer: int | None = None, layer_words: Callable[[int], str] = "layer {}".format) -> go.Figure:
    """The rows of generated token `index` (0-based) over `context` (self) or `source` (cross): one row a layer, the
    mean over heads (layer None), or one row a head of `layer`; `layer_words` names a layer (ModelFacts.layer_words:
    a hybrid's true layer numbers)."""
    rows = step.self_rows if kind == "self" else step.cross_rows  # (layers, heads, keys)
    keys, key_title = (context, "context") if kind == "self" else (source, "source")
    title = f"Step {index + 1} · {kind}-attention over the {key_title}"
    if layer is None:
        names = [layer_words(i) for i in range(rows.shape[0])]
        return rows_heatmap(layer_means(rows), names, keys, f"{title} · mean over heads", key_title)
    names = [f"head {h}" for h in range(rows.shape[1])]
    return rows_heatmap(rows[layer].astype(np.float32), names, keys, f"{title} · {layer_words(layer)}, every head",
                        key_title)


def generation(model: Model | Runner, text: str, *, step: int = -1, kind: Kind = "self", layer: int | None = None,
               max_new: int = 16, causal: CausalMode = "auto") -> go.Figure:
    """The attention of a generated token's query over its context, as the Generate page draws it after Run: the
    model writes up to `max_new` tokens greedily from `text` (stopping at its end token), and the figure shows the
    rows of token `step` (0-based; -1: the last).

    kind: "self" (over the context: the prompt, or an encoder-decoder's output so far) or "cross" (an
    encoder-decoder's attention over the source); layer: None for one row a layer (the mean over heads), or a
    layer for one row a head. causal: "auto" (as trained), "on" or "off". An encoder generates nothing: ValueError."""
    runner = runner_of(model)
    settings = DecodeSettings(max_new=max_new)  # greedy, as the page opens
    problems = settings.problems()
    if problems:
        raise UserError(" ".join(problems))
    if kind not in ("self", "cross"):
        raise UserError(f"kind is 'self' or 'cross', not {kind!r}")
    stepper = runner.stepper(text, RunOptions(causal=causal))
    steps = [compact(s) for s in generate(stepper, [], settings.max_new,
                                          lambda logits, i: choose_next(logits, settings, i))]
    if not steps:
        raise UserError(f"{runner.facts.model_id} generated no token from this text (its context is full)")
    index = check_index(step, len(steps), "step")
    chosen = steps[index]
    if kind not in step_kinds(chosen):
        raise UserError(f"{runner.facts.model_id} has no cross-attention: kind='self'")
    if layer is not None:
        layer = check_index(layer, chosen.self_rows.shape[0], "layer")
    written = [token for s in steps[:index] for token in stepper.tokens([s.token_id])]  # one at a time, as the page
    context = stepper.tokens(stepper.context) + written
    return step_figure(chosen, index, context, stepper.tokens(stepper.source), kind, layer, runner.facts.layer_words)
