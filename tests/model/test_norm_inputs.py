"""Each norm's input, found from the residual hooks (model/inspect/norm_inputs.py), is what the norm read: its
variance (LayerNorm) or mean square (RMSNorm) over d_model is the square of the model's own `hook_scale`, less
the norm's epsilon."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.norm_inputs import norm_input
from attention_atlas.model.registry import load_runner

HOOKS = RunOptions(hooks=("*.hook_scale", "*.hook_resid_pre", "*.hook_resid_mid", "*.hook_resid_mid_cross",
                          "*.hook_resid_post"))


def _check(runner, text: str) -> int:
    trace = runner.run(text, None, HOOKS)
    rms = "RMS" in trace.facts.norm
    checked = 0
    for name, scale in trace.captured.items():
        if not name.endswith("hook_scale"):
            continue
        source = norm_input(trace.facts, name)
        if source is None:
            continue
        x = trace.captured[source].astype(np.float64)  # (pos, d_model)
        spread = (x**2).mean(-1) if rms else x.var(-1)  # (pos,): the square of what the norm divides by, less its
        #                                                  epsilon (at most 1e-5 in these models)
        np.testing.assert_allclose(spread, scale[:, 0].astype(np.float64) ** 2, rtol=2e-3, atol=1.1e-5,
                                   err_msg=f"{name} reads {source}")
        checked += 1
    return checked


@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date", "minilm"])
def test_every_norm_reads_the_stream_named(model_id: str) -> None:
    runner = load_runner(model_id)
    assert _check(runner, runner.examples[0]) >= 4


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart"])
def test_every_norm_of_each_family_reads_the_stream_named(family: str, runners) -> None:
    assert _check(runners[family], "the cat sat on the mat") >= 2
