"""The Activations page's figures of the residual stream from a trace: its norm at every layer boundary and what each
block writes into it (Residual stream tab), and the logit lens through the model's own unembedding (Logit lens tab).
The page and `attention_atlas.plot` compute and draw through the functions here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np
import plotly.graph_objects as go

from attention_atlas.api import Model
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.lens import Lens, Unembedding
from attention_atlas.model.inspect.lens import logit_lens as read_lens
from attention_atlas.model.inspect.readout import spell_for, unembedding_for
from attention_atlas.plot.block_stream import BLOCK_MEASURES, block_hooks, block_measure, block_rows, blockwise
from attention_atlas.plot.common import (
    check_index,
    check_same_model,
    check_stack,
    layer_count,
    need_hooks,
    runner_of,
    stack_tokens,
)
from attention_atlas.viz.colour_range import CLIPPED, LOG, WHOLE, Scale, opening_scale, scaled
from attention_atlas.viz.logit_lens import lens_grid
from attention_atlas.viz.residual import boundary_labels, cosine_between_layers, layer_token_heatmap, norms, write_share

STREAM = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
          "hook_normalized_resid_post", "hook_resid_mid_cross")  # the residual view's hooks (read by position); the
#                                                                  lens, trajectories and norms' inputs read them too
MEASURES = {  # the residual view's measures: name -> (label, value name)
    "boundaries": ("‖residual‖ at each boundary", "‖x‖"),
    "attn": ("‖attn_out‖: what attention writes", "‖attn_out‖"),
    "mlp": ("‖mlp_out‖: what the MLP writes", "‖mlp_out‖"),
    "attn_share": ("attention's share of resid_mid", "share"),  # of resid_post where the blocks run side by side
    "mlp_share": ("the MLP's share of resid_post", "share"),
    "cosine": ("cosine between consecutive layers", "cosine"),
}
NORMS = ("boundaries", "attn", "mlp", "block")  # measures a massive activation flattens: drawn on a chosen colour scale
SCALES = {"auto": None, "whole": WHOLE, "log": LOG, "clipped": CLIPPED}  # residual(scale=…) -> the page's scale
Measure = Literal["boundaries", "attn", "mlp", "attn_share", "mlp_share", "cosine", "block", "block_share"]  # the
#                                                           keys of MEASURES and of a hybrid's BLOCK_MEASURES
ScaleName = Literal["auto", "whole", "log", "clipped"]  # the keys of SCALES
LENS_WINDOW = 32  # positions the logit lens reads at once (SmolLM2's readout: about 5 ms a position a layer)


def stream_patterns(stack: str) -> tuple[str, ...]:
    """The hooks= that record a stack's residual stream as the Activations page does."""
    return tuple(f"{stack}.*.{hook}" for hook in STREAM)


def stream_hooks(trace: Trace, stack: str) -> list[str]:
    """The hooks of the stream before layer 0, then after each layer: what the next layer reads (post-norm layers:
    their normalised output; a hybrid's decoder: after each block, attention or not)."""
    if blockwise(trace, stack):
        return block_hooks(trace)
    after = [f"{stack}.{i}.hook_normalized_resid_post" for i in range(layer_count(trace, stack))]
    return [f"{stack}.0.hook_resid_pre",
            *(hook if hook in trace.captured else hook.replace("normalized_", "") for hook in after)]


def layer_outputs(trace: Trace, stack: str) -> Iterator[np.ndarray]:
    """The stream before layer 0, then after each layer (`stream_hooks`), each (pos, d_model)."""
    return (trace.captured[hook] for hook in stream_hooks(trace, stack))


def measures_of(trace: Trace, stack: str) -> dict[str, tuple[str, str]]:
    """The residual view's measures of this stack: MEASURES, or a hybrid decoder's BLOCK_MEASURES."""
    return BLOCK_MEASURES if blockwise(trace, stack) else MEASURES


def stream_boundaries(trace: Trace, stack: str) -> tuple[str, ...]:
    """The residual hooks at each block's boundaries: pre, mid, post; pre and post where attention and the MLP run
    side by side (GPT-NeoX, Phi: no sum between them), attention's share then being of resid_post."""
    has_mid = f"{stack}.0.hook_resid_mid" in trace.captured
    return STREAM[:3] if has_mid else (STREAM[0], STREAM[2])


def measure_hooks(trace: Trace, stack: str, measure: str) -> tuple[str, ...]:
    """The hook kinds (without stack and layer) one residual measure reads."""
    boundaries = stream_boundaries(trace, stack)
    outputs = "hook_normalized_resid_post" if trace.facts.norm.startswith("post") else "hook_resid_post"
    return {"boundaries": boundaries, "attn": ("hook_attn_out",), "mlp": ("hook_mlp_out",),
            "attn_share": ("hook_attn_out", boundaries[1]), "mlp_share": ("hook_mlp_out", "hook_resid_post"),
            "cosine": ("hook_resid_pre", outputs)}[measure]


def residual_measure(trace: Trace, stack: str, measure: str) -> np.ndarray:
    """One measure of the residual view (MEASURES), (rows, pos): boundaries x layers rows for "boundaries", one row a
    layer for the others; a hybrid's decoder: block_measure."""
    if blockwise(trace, stack):
        return block_measure(trace, measure)
    captured, layers = trace.captured, layer_count(trace, stack)

    def norm_of(hook: str) -> np.ndarray:  # (layers, pos)
        return np.stack([norms(captured[f"{stack}.{i}.{hook}"]) for i in range(layers)])

    boundaries = stream_boundaries(trace, stack)
    if measure == "boundaries":
        return np.stack([norm_of(h) for h in boundaries], axis=1).reshape(len(boundaries) * layers, -1)
    if measure in ("attn", "mlp"):
        return norm_of(f"hook_{measure}_out")
    if measure == "attn_share":
        return write_share(norm_of("hook_attn_out"), norm_of(boundaries[1]))  # mid; post for side-by-side blocks
    if measure == "mlp_share":
        return write_share(norm_of("hook_mlp_out"), norm_of(boundaries[-1]))
    outputs = list(layer_outputs(trace, stack))
    return np.stack([cosine_between_layers(np.stack(outputs[i:i + 2]))[0] for i in range(layers)])


def residual_scale(measure: str, values: np.ndarray, choice: str) -> Scale:
    """How a measure's values are drawn: the norms on the colour scale `choice` (WHOLE, LOG, CLIPPED), the shares
    over their own range, the cosine from −1 to 1."""
    value_name = (MEASURES | BLOCK_MEASURES)[measure][1]
    if measure in NORMS:
        return scaled(values, value_name, choice)
    return Scale(values, (-1.0, 1.0) if measure == "cosine" else None, value_name, None)


def residual_rows(trace: Trace, stack: str, measure: str) -> list[str]:
    """The row names of a measure: "L0 pre", "L0 mid", "L0 post", … for the boundaries, "L0", "L1", … else (a
    hybrid's decoder: block_rows)."""
    if blockwise(trace, stack):
        return block_rows(trace, measure)
    layers = layer_count(trace, stack)
    where = [hook.removeprefix("hook_resid_") for hook in stream_boundaries(trace, stack)]
    return boundary_labels(layers, where) if measure == "boundaries" else [f"L{i}" for i in range(layers)]


def residual_figure(trace: Trace, stack: str, measure: str, shown: Scale) -> go.Figure:
    """A measure of the residual view drawn: layers (or layer boundaries) down, the stack's tokens across."""
    return layer_token_heatmap(shown.values, residual_rows(trace, stack, measure), stack_tokens(trace, stack),
                               f"{stack}: {measures_of(trace, stack)[measure][0]}", shown.value_name,
                               "RdBu" if measure == "cosine" else "Viridis", shown.zrange)


def residual(trace: Trace, stack: str | None = None, *, measure: Measure = "boundaries",
             scale: ScaleName = "auto") -> go.Figure:
    """The residual stream of a stack, (rows, tokens), as the Activations page's Residual stream tab draws it.

    measure: "boundaries" (‖x‖ before, between and after each layer's blocks), "attn" / "mlp" (‖what the block
    writes‖), "attn_share" / "mlp_share" (that over ‖the sum it went into‖) or "cosine" (between consecutive layers).
    scale (the norms): "auto" (the outliers left out of the colours where a few values dwarf the rest), "whole",
    "log" or "clipped". stack: "encoder" or "decoder" (default: the first whose stream the trace holds). Needs the
    stream recorded: model.run(text, hooks="*hook_resid*"); "attn", "mlp" and the shares also "*hook_attn_out" and
    "*hook_mlp_out"; "cosine" of a post-norm model "*hook_normalized_resid_post" (the stream its next layer reads).
    A hybrid's decoder (blocks other than attention among its layers) is read at every block, from
    "decoder.blocks.*": its measures are "boundaries", "block" (‖its output − its input‖), "block_share" and
    "cosine"."""
    if scale not in SCALES:
        raise UserError(f"scale is one of {', '.join(map(repr, SCALES))}, not {scale!r}")
    held = [s for s in ("encoder", "decoder") if f"{s}.0.hook_resid_pre" in trace or f"{s}.blocks.0.hook_resid_pre"
            in trace]
    stack = check_stack(trace, stack, held[0] if held else None)
    measures = measures_of(trace, stack)
    if measure not in measures:
        raise UserError(f"measure is one of {', '.join(map(repr, measures))}, not {measure!r}")
    if blockwise(trace, stack):
        need_hooks(trace, block_hooks(trace), [f"{stack}.blocks.*"], f"residual(measure={measure!r}) of the {stack}")
        return _drawn(trace, stack, measure, scale)
    hooks = measure_hooks(trace, stack, measure)
    stream = any(hook.startswith("hook_resid_") for hook in hooks)  # one pattern for every boundary of the stream
    patterns = [f"{stack}.*.{hook}" for hook in hooks if not hook.startswith("hook_resid_")]
    patterns += [f"{stack}.*.hook_resid_*"] if stream else []
    need_hooks(trace, [f"{stack}.{i}.{hook}" for hook in hooks for i in range(layer_count(trace, stack))], patterns,
               f"residual(measure={measure!r}) of the {stack}")
    return _drawn(trace, stack, measure, scale)


def _drawn(trace: Trace, stack: str, measure: str, scale: ScaleName) -> go.Figure:
    """A measure of the residual view drawn on the scale named `scale` ("auto": the opening one)."""
    values = residual_measure(trace, stack, measure)
    shown = residual_scale(measure, values, SCALES[scale] or opening_scale(values))
    return residual_figure(trace, stack, measure, shown)


def lens_positions(n: int, start: int | None = None) -> np.ndarray:
    """The positions the logit lens reads: LENS_WINDOW of them from `start` (None: the last ones)."""
    start = max(0, n - LENS_WINDOW) if start is None else start
    return np.arange(start, min(n, start + LENS_WINDOW))


def lens_read(trace: Trace, unembedding: Unembedding, positions: np.ndarray) -> Lens:
    """The logit lens at `positions` of the unembedding's stack, at every layer (a hybrid's: every block)."""
    residuals = np.stack([trace.captured[hook][positions] for hook in lens_hooks(trace, unembedding)])
    return read_lens(unembedding, residuals, positions)


def lens_hooks(trace: Trace, unembedding: Unembedding) -> list[str]:
    """The hooks the logit lens reads: each layer's output (a hybrid's decoder: each block's, attention or not)."""
    if blockwise(trace, unembedding.stack):
        return block_hooks(trace)[1:]
    return [unembedding.hook(i) for i in range(layer_count(trace, unembedding.stack))]


def lens_figure(trace: Trace, unembedding: Unembedding, read: Lens, spell: Callable[[list[int]], list[str]]
                ) -> go.Figure:
    """The lens drawn: layers down, the positions read across, each cell the top token (its probability the
    colour, the top five on hover)."""
    tokens = stack_tokens(trace, unembedding.stack)
    shown = [tokens[i] for i in read.positions]
    return lens_grid(read.top_ids, read.top_probs, spell, shown, read.positions,
                     f"logit lens · {unembedding.stack}: the top next token at each layer")


def logit_lens(trace: Trace, model: Model | Runner, *, start: int | None = None) -> go.Figure:
    """The logit lens (layers, positions), as the Activations page's Logit lens tab draws it: the model's own final
    norm and unembedding applied to the stream after every layer, the top next token in each cell.

    model: the `attention_atlas.Model` that made the trace (its unembedding is read). start: the first of the 32
    positions read (default: the last 32). Needs each layer's output recorded: model.run(text,
    hooks="decoder.*.hook_resid_post") (post-norm models: "decoder.*.hook_normalized_resid_post"; a hybrid reads
    every block's, which that pattern records too)."""
    runner = runner_of(model)
    check_same_model(trace, runner)
    unembedding = unembedding_for(runner)
    if isinstance(unembedding, str):
        raise UserError(unembedding)
    pattern = f"{unembedding.stack}.*.{unembedding.layer_output}"
    need_hooks(trace, lens_hooks(trace, unembedding), [pattern], "logit_lens")
    n = len(stack_tokens(trace, unembedding.stack))
    positions = lens_positions(n, None if start is None else check_index(start, n, "start position"))
    return lens_figure(trace, unembedding, lens_read(trace, unembedding, positions), spell_for(runner))
