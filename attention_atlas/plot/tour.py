"""The Tour's figures: each step of the forward pass (model/inspect/tour.py) drawn from a trace recorded with the
tour's hooks (`Model.tour`), as the Tour page draws it (the page draws through `step_figure` and `next_token_figure`):

    import attention_atlas as aa
    model = aa.load("toy-date")
    trace = model.tour("march 3 2021")
    steps = aa.plot.tour_steps(trace)            # each with .title and .text
    aa.plot.tour(trace, "encoder.softmax", head=2)

Nothing here imports Streamlit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.api import Model
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import likeliest
from attention_atlas.model.inspect.tour import Step, shape_label, tour_steps
from attention_atlas.plot.block_stream import blockwise, kind_word
from attention_atlas.plot.common import check_same_model, runner_of, stack_tokens
from attention_atlas.plot.stream import stream_hooks
from attention_atlas.viz.outputs import next_token_bars, token_table
from attention_atlas.viz.residual import layer_token_heatmap, norms
from attention_atlas.viz.step_through import dimension_names, step_heatmap, truncation_note
from attention_atlas.viz.tokens import position_label, visible_token

NEXT_TOKENS = 10  # bars in the last step
FIGURE_KINDS = ("matrix", "head", "mask", "pattern", "layers")  # the kinds `step_figure` draws from the trace alone


@dataclass(frozen=True)
class StepFigure:
    """A step drawn: its figure, the (rows, columns) numbers it draws (a table's), and the line saying their shape."""

    figure: go.Figure
    value: np.ndarray
    rows: list[str]
    columns: list[str]
    shape: str
    note: str = ""  # where a matrix is drawn cut at the heatmap's limit: how


def tour(trace: Trace, step: int | str, *, head: int = 0, model: Model | Runner | None = None
         ) -> go.Figure | pd.DataFrame | None:
    """The figure of one step of `trace`'s tour (`tour_steps`: by its index or its key, "encoder.softmax"), as the
    Tour page draws it: the tokens step as their table, a head's step for `head` (of the first block), the next
    token's bars from `model` (the one that made the trace); None for a step of words alone."""
    steps = tour_steps(trace)
    keys = [s.key for s in steps]
    if isinstance(step, str) and step not in keys:
        raise UserError(f"this tour has no step {step!r}; its steps: {', '.join(map(repr, keys))}")
    if isinstance(step, int) and not -len(steps) <= step < len(steps):
        raise UserError(f"this tour has {len(steps)} steps: choose 0 to {len(steps) - 1}")
    chosen = steps[keys.index(step)] if isinstance(step, str) else steps[step]
    if chosen.kind in ("head", "mask", "pattern") and not 0 <= head < trace.facts.n_heads:
        raise UserError(f"{trace.facts.model_id} has heads 0 to {trace.facts.n_heads - 1}, not {head}")
    if chosen.kind == "tokens":
        return tokens_table(trace, chosen)
    if chosen.kind == "next token":
        if model is None:
            raise UserError("the next token's step reads the model's unembedding: pass model=, the model that made "
                            "this trace")
        runner = runner_of(model)
        check_same_model(trace, runner)
        return next_token_figure(trace, likeliest(runner, trace, -1, NEXT_TOKENS))
    if chosen.kind not in FIGURE_KINDS:
        return None
    return step_figure(trace, chosen, head).figure


def tokens_table(trace: Trace, step: Step) -> pd.DataFrame:
    """The tokens step: each token the step's stack reads (an encoder-decoder's decoder: its output so far), its id,
    and whether it is a special token."""
    ids = trace.query_ids(f"{step.stack}.attn")
    special = set(trace.facts.special_ids)
    return token_table(stack_tokens(trace, step.stack), ids, [i in special for i in ids])


def step_figure(trace: Trace, step: Step, head: int = 0) -> StepFigure:
    """A step of a kind in FIGURE_KINDS drawn: a stack's (tokens, width) value, one head's value, scores (masked or
    not) or pattern (of the first block), or each block's output as the length of each token's vector."""
    if step.kind == "layers":
        return _layers(trace, step)
    if step.kind == "matrix":
        value = trace.captured[step.hook]  # (tokens, width)
        return _matrix(value, _labels(stack_tokens(trace, step.stack)), step.hook, ("token", step.dims[1]),
                       shape_label(step.dims, value.shape))
    site = step.site
    queries, keys = _labels(trace.query_tokens(site)), _labels(trace.key_tokens(site))
    allowed = trace.masks[site]  # (queries, keys)
    if step.kind == "pattern":
        pattern = trace.head_pattern(site, 0, head)  # (queries, keys)
        figure = step_heatmap(np.where(allowed, pattern, -np.inf), queries, keys,
                              f"{site}.0 · head {head}: the attention pattern", axis_titles=("query", "key"),
                              zrange=(0.0, 1.0), colorscale="Viridis")
        shape = shape_label(("queries", "keys"), pattern.shape) + " for one head; each row adds up to 1"
        return StepFigure(figure, pattern, queries, keys, shape)
    value = trace.captured[step.hook]
    shape = shape_label(step.dims, value.shape) + f"; head {head} shown"
    one = value[head]
    if step.kind == "head" and step.dims[1] == "tokens":
        return _matrix(one, queries, f"{step.hook} · head {head}", ("token", "d_head"), shape)
    shown = np.where(allowed, one, -np.inf) if step.kind == "mask" else one  # (queries, keys)
    title = f"{step.hook} · head {head}" + (" · masked" if step.kind == "mask" else "")
    return StepFigure(step_heatmap(shown, queries, keys, title, axis_titles=("query", "key")), shown, queries, keys,
                      shape)


def next_token_figure(trace: Trace, found: list[tuple[str, float]]) -> go.Figure:
    """The likeliest next tokens after the decoder's last token, as (text, probability) (`likeliest`), as bars."""
    decoder = trace.target_tokens if trace.facts.kind == "encoder-decoder" else trace.tokens
    texts, probabilities = zip(*found, strict=True)
    return next_token_bars(list(texts), np.array(probabilities), f"After {visible_token(decoder[-1])!r}")


def _labels(tokens: list[str]) -> list[str]:
    return [position_label(i, t) for i, t in enumerate(tokens)]


def _matrix(value: np.ndarray, rows: list[str], title: str, names: tuple[str, str], shape: str) -> StepFigure:
    """A (rows, columns) value drawn cut at the step heatmap's limit, saying how where it is cut."""
    columns = dimension_names(value.shape[1])
    figure = step_heatmap(value, rows, columns, title, axis_titles=names)
    return StepFigure(figure, value, rows, columns, shape, truncation_note(value.shape) or "")


def _layers(trace: Trace, step: Step) -> StepFigure:
    """Each block's output, as the length of each token's vector: (layers, tokens)."""
    stack = step.stack
    tokens = stack_tokens(trace, stack)
    hooks = stream_hooks(trace, stack)[1:]  # after each block (a hybrid's: every block, attention or not)
    outputs = [trace.captured[hook] for hook in hooks]  # each (tokens, d_model)
    layers = len(outputs)
    lengths = np.stack([norms(output) for output in outputs])  # (layers, tokens): no copy of every layer's vectors
    kinds = trace.facts.block_kinds if blockwise(trace, stack) else []
    blocks = [f"after block {b}" + (f" ({kind_word(kinds[b])})" if kinds else "") for b in range(layers)]
    title = f"‖{hooks[0].replace('.0.', '.*.', 1)}‖ for each token"
    figure = layer_token_heatmap(lengths, blocks, tokens, title, "length")
    shape = shape_label(("layers", "tokens", "d_model"), (layers, *outputs[0].shape))
    return StepFigure(figure, lengths, blocks, _labels(tokens), shape)
