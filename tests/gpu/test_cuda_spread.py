"""A Hugging Face model spread over the GPU and the CPU by accelerate (model/hf/placement.py): a 4-layer tiny Llama
whose GPU budget holds its embedding and first layer, the rest kept on the CPU and brought to the GPU for each pass,
traces, summarises and generates as the same model whole on the CPU does; the model card says where it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import attention_atlas as aa
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.placement import Placement
from attention_atlas.model.registry import load_runner
from tests.gpu.compare import (
    FLOAT32,
    assert_same_hooks,
    assert_same_outputs,
    assert_same_steps,
    assert_same_summary,
    greedy_margin,
)
from tests.gpu.models import TEXT, following, steps_of
from tests.tiny_hf import build

GPU_BUDGET = 80_000  # bytes: the embedding (22 x 32 floats) and one layer (about 37 KB) of the 4-layer tiny Llama
CPU_BUDGET = 1 << 30  # the rest, and far more
EVERY_HOOK = RunOptions(hooks=("*",))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build("llama", tmp_path_factory.mktemp("spread") / "llama", num_hidden_layers=4)


@pytest.fixture(scope="module")
def runners(folder) -> tuple:
    """(the model whole on the CPU, the same model spread over GPU 0 and the CPU)."""
    return (load_runner(str(folder)),
            load_runner(str(folder), placement=Placement(max_memory=(("0", GPU_BUDGET), ("cpu", CPU_BUDGET)))))


def test_the_layers_past_the_gpu_budget_stay_on_the_cpu(runners) -> None:
    _, spread = runners
    placed = spread.model.hf_device_map
    assert placed["model.embed_tokens"] == 0 and placed["lm_head"] == "cpu"
    assert set(placed.values()) == {0, "cpu"}  # nothing on the disk
    assert spread.facts.device == "cuda:0 + cpu"
    assert spread.facts.notes["where the layers are"].startswith("GPU 0: model.embed_tokens")


def test_a_spread_models_trace_is_the_whole_models(runners) -> None:
    """Every hook and output, float32 (1e-4); the greedy continuation where the CPU's choices are clear."""
    whole, spread = runners
    ours, theirs = spread.run(TEXT, options=EVERY_HOOK), whole.run(TEXT, options=EVERY_HOOK)
    assert not ours.fallback
    assert_same_hooks(ours, theirs, FLOAT32)
    assert_same_outputs(ours, theirs, FLOAT32)
    if greedy_margin(steps_of(whole)) > FLOAT32.probability:
        assert ours.output_text == theirs.output_text


def test_a_spread_models_summary_and_generation_are_the_whole_models(runners) -> None:
    whole, spread = runners
    options = RunOptions(hooks=("*.hook_pattern", "*.hook_resid_post"), summarised=True)
    ours, theirs = spread.run(TEXT, options=options), whole.run(TEXT, options=options)
    for site, summary in theirs.summaries.items():
        assert_same_summary(ours.summaries[site], summary, FLOAT32, site)
    assert_same_hooks(ours, theirs, FLOAT32)
    cpu_steps = steps_of(whole, 6)
    assert_same_steps(steps_of(spread, 6, following(cpu_steps)), cpu_steps, FLOAT32)


def test_the_python_api_spreads_a_model_by_its_budgets(folder) -> None:
    """aa.load's device_map and max_memory, as a person types them (float32: "auto" is bfloat16 on this GPU, where the
    whole model fits in GPU_BUDGET)."""
    spread = aa.load(str(folder), precision="float32", device_map="auto",
                     max_memory={"0": f"{GPU_BUDGET}", "cpu": "1GiB"})
    whole = aa.load(str(folder), device="cpu")
    assert spread.facts.device == "cuda:0 + cpu"
    ours, theirs = spread.run(TEXT, hooks="*.hook_resid_post"), whole.run(TEXT, hooks="*.hook_resid_post")
    for name in theirs.names():
        np.testing.assert_allclose(ours[name], theirs[name], rtol=FLOAT32.relative, atol=FLOAT32.relative,
                                   err_msg=name)
