"""Every plotly figure of viz/ shows hostile text as typed: a token, a title, a name or a measure that looks like HTML
or like a hover placeholder reaches no string of the figure raw (plotly renders some HTML in titles, ticks, hovers,
legends and annotations, and fills `%{...}` in hover templates and titles). The figure functions are found by walking
viz/, so a new one fails `test_every_figure_function_is_built_here` until it is built here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

import attention_atlas.viz as viz_package
from attention_atlas.viz import (
    ablation,
    attribution,
    circuit,
    experts,
    generation,
    head_lines,
    heatmap,
    logit_lens,
    long_views,
    masks,
    neurons,
    outputs,
    positions,
    residual,
    roles,
    score_parts,
    shapes,
    step_through,
    thumbnails,
    tour,
    trajectories,
)

# hostile text -> how it must read in the figure (the escaped form); none holds a space, which tokens show as "·"
HOSTILE = {"<b>bold</b>": "&lt;b&gt;bold&lt;/b&gt;",
           "<img/src=x/onerror=alert(1)>": "&lt;img/src=x/onerror=alert(1)&gt;", "a&b": "a&amp;b",
           "q%{x}q": "q&#37;{x}q"}
RAW = {"<b>bold</b>": "<b>bold", "<img/src=x/onerror=alert(1)>": "<img", "a&b": "a&b", "q%{x}q": "%{x}q"}

Build = Callable[[str], go.Figure]  # hostile text -> a figure with it in every text it takes


def _tokens(h: str) -> list[str]:
    return ["the", h, "cat"]


def _layer_calls(h: str) -> pd.DataFrame:
    return pd.DataFrame({"module": [f"encoder.0.{h}", "encoder.0.out"], "layer": [0, 0], "leaf": [True, True],
                         "type": [h, "Linear"], "parameters": [0, 12], "input_shapes": ["(1, 3, 4)"] * 2,
                         "output_shape": ["(1, 3, 4)"] * 2})


def _projection() -> trajectories.Projection:
    return trajectories.fit_pca([np.random.default_rng(0).normal(size=(3, 4))])


RNG = np.random.default_rng(0)
BUILDERS: dict[str, Build] = {
    "ablation.scan_heatmap": lambda h: ablation.scan_heatmap(RNG.random((2, 3)), h, h, [h, "b"]),
    "score_parts.sides_figure": lambda h: score_parts.sides_figure(([h, "b"], RNG.random(2)), ([h, "c"], RNG.random(2)),
                                                                   1.0, h),
    "score_parts.pairs_figure": lambda h: score_parts.pairs_figure([h, "b"], [h, "c"], RNG.random((2, 2)), h),
    "score_parts.row_figure": lambda h: score_parts.row_figure([h, "b"], _tokens(h), np.arange(3), RNG.random((2, 3)),
                                                               RNG.random(3), h),
    "score_parts.clickable_cells": lambda h: score_parts.clickable_cells(
        heatmap.attention_heatmap(RNG.random((3, 3)), _tokens(h), _tokens(h), h), h, h),
    "long_views.pooled_figure": lambda h: long_views.pooled_figure(RNG.random((2, 3)), np.array([0, 1, 2]),
                                                                   np.array([0, 1, 2, 3]), h, (0, 1, 0, 2)),
    "long_views.distance_figure": lambda h: long_views.distance_figure(RNG.random((3, 4)), np.arange(4), _tokens(h),
                                                                       h),
    "long_views.sink_apart_figure": lambda h: long_views.sink_apart_figure(
        RNG.random((3, 1)), RNG.random((3, 2)), None, _tokens(h), [0, 1, 2], _tokens(h), [0], [1, 2], h, h),
    "circuit.circuit_figure": lambda h: circuit.circuit_figure(  # node names are the graph's own ("a0.h1"), not text
        [("a0.h1", 0.0, 0.0), ("logits", 1.0, 0.0)], [(0, 1, "q", -0.5)], h),
    "circuit.faithfulness_figure": lambda h: circuit.faithfulness_figure([0, 1, 2], [0.0, 0.5, 1.0], 1, h),
    "roles.role_grid": lambda h: roles.role_grid(np.array([["sink", "induction"], ["mixed", "local"]]),
                                                 RNG.random((2, 2)), np.array([[h, h], ["", h]]), h, [h, "b"]),
    "ablation.change_bars": lambda h: ablation.change_bars(_tokens(h), RNG.random(3), h, h),
    "attribution.head_shares_heatmap": lambda h: attribution.head_shares_heatmap(RNG.random((2, 3)), h, h),
    "attribution.layer_shares_bars": lambda h: attribution.layer_shares_bars({h: RNG.random(2)}, h, h),
    "attribution.block_shares_bars": lambda h: attribution.block_shares_bars({h: 0.5, "L1.rest": -0.2}, h, h),
    "attribution.patching_heatmap": lambda h: attribution.patching_heatmap(RNG.random((2, 3)), _tokens(h), h),
    "attribution.contribution_graph_figure": lambda h: attribution.contribution_graph_figure(
        [("attention", 0, 0, 1, 0.5), ("residual", 0, 1, 1, 0.7)], _tokens(h), 1, [(0.5, 0.5, f"{h} → x\n{h}")], h),
    "experts.routing_heatmap": lambda h: experts.routing_heatmap(RNG.random((3, 4)), np.array([[0], [1], [2]]),
                                                                 _tokens(h), h, h),
    "experts.expert_load_heatmap": lambda h: experts.expert_load_heatmap(np.ones((2, 4), np.int64), [h, "b"], h),
    "generation.rows_heatmap": lambda h: generation.rows_heatmap(RNG.random((2, 3)), [h, "b"], _tokens(h), h, h),
    "generation.alternatives_bar": lambda h: generation.alternatives_bar(_tokens(h), RNG.random(3), 1, h),
    "head_lines.head_lines_figure": lambda h: head_lines.head_lines_figure(RNG.random((1, 3, 3)), _tokens(h),
                                                                           _tokens(h), [0], 1, h, threshold=0.0),
    "heatmap.matrix_heatmap": lambda h: heatmap.matrix_heatmap(RNG.random((3, 3)), _tokens(h), _tokens(h), h,
                                                               value_name=h, axis_titles=(h, h)),
    "heatmap.attention_heatmap": lambda h: heatmap.attention_heatmap(
        RNG.random((2, 2)), ["a", "b"], ["a", "b"], h, categories=([h, "b"], [h, "b"]), masked=np.eye(2, dtype=bool)),
    "heatmap.similarity_heatmap": lambda h: heatmap.similarity_heatmap(RNG.random((3, 3)), _tokens(h), h),
    "heatmap.layer_head_heatmap": lambda h: heatmap.layer_head_heatmap(RNG.random((2, 3)), h, h),
    "heatmap.sink_bars": lambda h: heatmap.sink_bars(RNG.random(3).astype(np.float32), _tokens(h), [0, 1, 2], h),
    "logit_lens.lens_grid": lambda h: logit_lens.lens_grid(np.zeros((2, 3, 2), np.int64), RNG.random((2, 3, 2)),
                                                           lambda ids: [h] * len(ids), _tokens(h), [0, 1, 2], h),
    "logit_lens.rank_lines": lambda h: logit_lens.rank_lines(np.ones((2, 1), np.int64), RNG.random((2, 1)), [h], h),
    "masks.mask_figure": lambda h: masks.mask_figure(np.tril(np.ones((3, 3), bool)),
                                                     masks.hidden_reasons(np.tril(np.ones((3, 3), bool)), True),
                                                     _tokens(h), _tokens(h), h),
    "masks.difference_figure": lambda h: masks.difference_figure(RNG.random((3, 3)), _tokens(h), _tokens(h), h),
    "masks.next_token_comparison": lambda h: masks.next_token_comparison({h: (_tokens(h), RNG.random(3))}, h),
    "neurons.coloured_text": lambda h: neurons.coloured_text(_tokens(h), RNG.random(3), h),
    "outputs.next_token_bars": lambda h: outputs.next_token_bars(_tokens(h), RNG.random(3), h),
    "positions.table_heatmap": lambda h: positions.table_heatmap(RNG.random((3, 4)), h),
    "positions.similarity_figure": lambda h: positions.similarity_figure(RNG.random((3, 3)), h, h),
    "positions.bias_heatmap": lambda h: positions.bias_heatmap(RNG.random((2, 5)), h),
    "positions.token_heatmap": lambda h: positions.token_heatmap(RNG.random((3, 4)), _tokens(h), h, (0.0, 1.0)),
    "residual.layer_token_heatmap": lambda h: residual.layer_token_heatmap(RNG.random((2, 3)), [h, "b"], _tokens(h),
                                                                           h, h),
    "residual.layer_lines": lambda h: residual.layer_lines(RNG.random((1, 3)), [h], h, h),
    "shapes.layer_diagram": lambda h: shapes.layer_diagram(_layer_calls(h), h),
    "step_through.step_heatmap": lambda h: step_through.step_heatmap(RNG.random((3, 3)), _tokens(h), _tokens(h), h,
                                                                     axis_titles=(h, h)),
    "thumbnails.thumbnail_figure": lambda h: thumbnails.thumbnail_figure(
        thumbnails.thumbnail_grid([RNG.random((2, 3, 3))], 4), 4, h),
    "tour.tour_diagram": lambda h: tour.tour_diagram([h, "b"], [h, ""], 0),
    "trajectories.trajectory_figure": lambda h: trajectories.trajectory_figure(RNG.random((2, 3, 2)), _tokens(h),
                                                                               [0, 1, 2], _projection(), h),
}


def figure_functions() -> set[str]:
    """Every public function of viz/ that returns a plotly figure, as "module.function"."""
    found = set()
    for info in pkgutil.iter_modules(viz_package.__path__):
        module = importlib.import_module(f"{viz_package.__name__}.{info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ == module.__name__ and not name.startswith("_") \
                    and "go.Figure" in str(inspect.signature(function).return_annotation):
                found.add(f"{info.name}.{name}")
    return found


def strings(value: object) -> Iterator[str]:
    """Every string anywhere in a figure's dict (numpy arrays of strings included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "OU":
        yield from strings(value.ravel().tolist())


def test_every_figure_function_is_built_here() -> None:
    assert figure_functions() == set(BUILDERS)


@pytest.mark.parametrize("hostile", list(HOSTILE))
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_hostile_text_reaches_no_figure_raw(name: str, hostile: str) -> None:
    texts = list(strings(BUILDERS[name](hostile).to_dict()))
    raw = [text for text in texts if RAW[hostile] in text]
    assert not raw, raw
    assert any(HOSTILE[hostile] in text for text in texts), f"{name} dropped the text {hostile!r}"
