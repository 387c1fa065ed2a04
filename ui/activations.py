"""The Activations page's data: which hooks each view asks for, and what it derives from them, computed once
per trace (ui.trace_cache.per_trace). Hook requests stay bounded: the residual stream of one stack (5 hook kinds,
about 140 MB each for a 2,048-token SmolLM2 run), one layer's FFN hidden layer, the norms' scales."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.lens import Lens, Unembedding
from attention_atlas.model.inspect.readout import forward_for
from attention_atlas.model.inspect.shapes import calls_table, shape_trace
from attention_atlas.plot.stream import layer_outputs, lens_read, measures_of, residual_measure, stream_patterns
from attention_atlas.ui.page import trace_with
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.trajectories import Projection, fit_pca

HEATMAP_NEURONS = 32  # neurons in the token x neuron heatmap
TEXT_WINDOW = 256  # tokens of coloured text drawn at once
TRAJECTORY_TOKENS = 12  # tokens drawn by default


def stream_trace(stack: str) -> Trace:
    """This run again, capturing one stack's residual stream and what each block writes into it."""
    return trace_with(stream_patterns(stack))


def residual_measures(trace: Trace, stack: str) -> dict[str, np.ndarray]:
    """Every measure of the residual view (`residual_measure`, `measures_of`), each (rows, pos), once per trace."""
    measures = measures_of(trace, stack)
    values = per_trace(trace, ("activations residual", stack),
                       lambda: tuple(residual_measure(trace, stack, measure) for measure in measures))
    return dict(zip(measures, values, strict=True))


def projection(trace: Trace, stack: str) -> tuple[Projection, np.ndarray]:
    """The PCA of every layer's output of this text, and every token's points (layers + 1, pos, 2)."""

    def compute() -> tuple[Projection, np.ndarray]:
        fit = fit_pca(layer_outputs(trace, stack))
        return fit, np.stack([fit.apply(x.astype(np.float64)) for x in layer_outputs(trace, stack)])

    return per_trace(trace, ("activations pca", stack), compute)


def lens_of(trace: Trace, unembedding: Unembedding, positions: np.ndarray) -> Lens:
    """The logit lens at `positions` of the unembedding's stack, at every layer (`lens_read`), once per trace (a
    window: the readout of SmolLM2's 49,152 tokens costs about 5 ms a row)."""
    return per_trace(trace, ("activations lens", tuple(positions.tolist())),
                     lambda: lens_read(trace, unembedding, positions))


def shapes_of_run(trace: Trace, runner: Runner) -> pd.DataFrame:
    """The shape trace of one forward pass over this trace's tokens, once per trace."""

    def compute() -> pd.DataFrame:
        with st.spinner("Tracing every module…"), run_slots():  # a forward pass: one of the server's MAX_RUNS
            return calls_table(shape_trace(*forward_for(runner, trace)))

    return per_trace(trace, "activations shapes", compute)


def missing_hooks(trace: Trace, names: tuple[str, ...]) -> bool:
    """Say which of `names` this model does not offer (none captured); True when some are missing."""
    absent = [name for name in names if name not in trace.captured]
    if absent:
        st.info(f"{trace.facts.model_id} offers no {', '.join(absent)} here, so this view cannot be drawn.",
                icon=":material/info:")
    return bool(absent)


def fall_back(key: str, limit: int, what: str) -> None:
    """A number from the URL (or another model) outside 0..limit-1: say so and use 0."""
    value = st.session_state.get(key)
    if value is not None and not (isinstance(value, int) and 0 <= value < limit):
        st.warning(f"{what} {value} does not exist here (0–{limit - 1}): showing {what} 0.", icon=":material/info:")
        st.session_state[key] = 0
