"""The Positional encoding page's main figure: the paper's sinusoidal table for a length and d_model, which open on
a trace's text length and its model's d_model."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from attention_atlas.model.core import sinusoid as pe
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.plot.common import check_stack, stack_tokens
from attention_atlas.viz.positions import table_heatmap


def default_size(trace: Trace, stack: str) -> tuple[int, int]:
    """The (length, d_model) the page opens on: the stack's text length (at most the model's longest) and the
    model's d_model."""
    return min(len(stack_tokens(trace, stack)), trace.facts.max_len), trace.facts.d_model


def sinusoid_figure(table: np.ndarray) -> go.Figure:
    """A (length, d_model) sinusoid table drawn (every n-th row and column past 512)."""
    return table_heatmap(table, f"sinusoid · {len(table)} positions × d_model {table.shape[1]}")


def positional(trace: Trace | None = None, *, stack: str | None = None, length: int | None = None,
               d_model: int | None = None) -> go.Figure:
    """The sinusoidal positional encoding table PE (length, d_model) of Vaswani et al. (2017), as the Positional
    encoding page's Sinusoid tab draws it: position down, dimension across, from −1 (blue) to 1 (red).

    With a trace: its stack's text length and its model's d_model unless given (stack: "encoder" or "decoder",
    default: the first), at most its model's longest sequence. Without one: `length` and `d_model` (even)."""
    if trace is None:
        if length is None or d_model is None:
            raise UserError("positional() needs a trace, or both length= and d_model=")
        limit = length
    else:
        default_length, default_d_model = default_size(trace, check_stack(trace, stack))
        length = default_length if length is None else length
        d_model = default_d_model if d_model is None else d_model
        limit = trace.facts.max_len
    problem = pe.check_table_size(int(length), int(d_model), limit)
    if problem is not None:
        raise UserError(problem)
    return sinusoid_figure(pe.sinusoid(int(length), int(d_model)))
