"""The Activations page's data: which hooks each view asks for, and what it derives from them, computed once
per trace (ui.trace_cache.per_trace). Hook requests stay bounded: the residual stream of one stack (5 hook kinds,
about 140 MB each for a 2,048-token SmolLM2 run), one layer's FFN hidden layer, the norms' scales."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.lens import Lens, Unembedding, logit_lens
from attention_atlas.model.inspect.readout import forward_for
from attention_atlas.model.inspect.shapes import calls_table, shape_trace
from attention_atlas.ui.page import trace_with
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.residual import cosine_between_layers, norms, write_share
from attention_atlas.viz.trajectories import Projection, fit_pca

STREAM = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
          "hook_normalized_resid_post", "hook_resid_mid_cross")  # the residual view's hooks (read by position); the
#                                                                  lens, trajectories and norms' inputs read them too
HEATMAP_NEURONS = 32  # neurons in the token x neuron heatmap
TEXT_WINDOW = 256  # tokens of coloured text drawn at once
LENS_WINDOW = 32  # positions the logit lens reads at once (SmolLM2's readout: about 5 ms a position a layer)
TRAJECTORY_TOKENS = 12  # tokens drawn by default


def layer_count(trace: Trace, stack: str) -> int:
    return trace.facts.n_encoder_layers if stack == "encoder" else trace.facts.n_decoder_layers


def stack_tokens(trace: Trace, stack: str) -> list[str]:
    """The tokens a stack reads: the decoder of an encoder-decoder reads the output."""
    return trace.query_tokens(f"{stack}.attn")


def stream_trace(stack: str) -> Trace:
    """This run again, capturing one stack's residual stream and what each block writes into it."""
    return trace_with(tuple(f"{stack}.*.{hook}" for hook in STREAM))


def layer_outputs(trace: Trace, stack: str) -> Iterator[np.ndarray]:
    """The stream before layer 0, then after each layer, each (pos, d_model): what the next layer reads
    (post-norm layers: their normalised output)."""
    layers = layer_count(trace, stack)
    yield trace.captured[f"{stack}.0.hook_resid_pre"]
    for i in range(layers):
        normalized = f"{stack}.{i}.hook_normalized_resid_post"
        yield trace.captured.get(normalized, trace.captured[f"{stack}.{i}.hook_resid_post"])


def stream_boundaries(trace: Trace, stack: str) -> tuple[str, ...]:
    """The residual hooks at each block's boundaries: pre, mid, post; pre and post where attention and the MLP run
    side by side (GPT-NeoX, Phi: no sum between them), attention's share then being of resid_post."""
    has_mid = f"{stack}.0.hook_resid_mid" in trace.captured
    return STREAM[:3] if has_mid else (STREAM[0], STREAM[2])


def residual_measures(trace: Trace, stack: str) -> dict[str, np.ndarray]:
    """Every measure of the residual view, each (rows, pos), computed once per trace."""

    def compute() -> tuple[np.ndarray, ...]:  # a tuple: the cache can size it
        c, layers = trace.captured, layer_count(trace, stack)
        hook = lambda name: [c[f"{stack}.{i}.{name}"] for i in range(layers)]  # noqa: E731
        boundaries = [np.stack([norms(x) for x in hook(h)]) for h in stream_boundaries(trace, stack)]  # (layers, pos)
        attn, mlp = (np.stack([norms(x) for x in hook(h)]) for h in STREAM[3:5])
        outputs = list(layer_outputs(trace, stack))
        cosine = np.stack([cosine_between_layers(np.stack(outputs[i:i + 2]))[0] for i in range(layers)])
        stacked = np.stack(boundaries, axis=1).reshape(len(boundaries) * layers, -1)  # (boundaries x layers, pos)
        return stacked, attn, mlp, write_share(attn, boundaries[-2]), write_share(mlp, boundaries[-1]), cosine

    values = per_trace(trace, ("activations residual", stack), compute)
    return dict(zip(("boundaries", "attn", "mlp", "attn_share", "mlp_share", "cosine"), values, strict=True))


def projection(trace: Trace, stack: str) -> tuple[Projection, np.ndarray]:
    """The PCA of every layer's output of this text, and every token's points (layers + 1, pos, 2)."""

    def compute() -> tuple[Projection, np.ndarray]:
        fit = fit_pca(layer_outputs(trace, stack))
        return fit, np.stack([fit.apply(x.astype(np.float64)) for x in layer_outputs(trace, stack)])

    return per_trace(trace, ("activations pca", stack), compute)


def lens_of(trace: Trace, unembedding: Unembedding, positions: np.ndarray) -> Lens:
    """The logit lens at `positions` of the unembedding's stack, at every layer (a window: the readout of SmolLM2's
    49,152 tokens costs about 5 ms a row)."""

    def compute() -> Lens:
        layers = layer_count(trace, unembedding.stack)
        residuals = np.stack([trace.captured[unembedding.hook(i)][positions] for i in range(layers)])
        return logit_lens(unembedding, residuals, positions)

    return per_trace(trace, ("activations lens", tuple(positions.tolist())), compute)


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
