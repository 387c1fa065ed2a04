"""A run on the GPU gives the CPU's trace: every shipped toy model, and a tiny random Hugging Face model of every family
and type in float32 (to 1e-4) and in bfloat16 (to bfloat16's rounding, against float32 on the CPU): every hook, the
outputs, the tokens it chose (or tied ones); auto picks the GPU, and the app leaves float32 products in full
precision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attention_atlas as aa
from attention_atlas.model.core.options import RunOptions
from tests.gpu.compare import (
    BFLOAT16,
    FLOAT32,
    assert_close_values,
    assert_same_hooks,
    assert_same_outputs,
    greedy_margin,
    tolerance,
)
from tests.gpu.models import DEVICE, PRECISION_NAMES, TEXT, TINY, TOYS, steps_of, target_for

EVERY_HOOK = RunOptions(hooks=("*",))


@pytest.mark.parametrize("toy", TOYS)
def test_a_toy_models_trace_on_the_gpu_is_the_cpus(loaded, toy: str) -> None:
    """Float32 (the toy models are float32 whatever is asked): every hook, the log-probabilities, the greedy output
    and each of its steps' attention rows. Trained models choose clearly (their choices lead by 0.04 or more on the
    CPU), so the output is the same text."""
    cpu, gpu = loaded(toy), loaded(toy, DEVICE)
    assert gpu.facts.device.startswith(DEVICE)
    text = cpu.examples[0]
    ours, theirs = gpu.run(text, options=EVERY_HOOK), cpu.run(text, options=EVERY_HOOK)
    assert_same_hooks(ours, theirs, FLOAT32)
    assert_same_outputs(ours, theirs, FLOAT32, distributions=np.exp(theirs.outputs["log_probs"]))
    assert ours.output_text == theirs.output_text
    assert [s.token_id for s in ours.steps] == [s.token_id for s in theirs.steps]
    for index, (a, b) in enumerate(zip(ours.steps, theirs.steps, strict=True)):
        assert a.attention.keys() == b.attention.keys()
        for name, row in b.attention.items():
            np.testing.assert_allclose(a.attention[name], row, atol=FLOAT32.pattern, err_msg=f"step {index} {name}")


@pytest.mark.parametrize("precision", PRECISION_NAMES)
@pytest.mark.parametrize("model", TINY)
def test_a_hugging_face_models_trace_on_the_gpu_is_the_cpus(loaded, model: str, precision: str) -> None:
    """Every hook (patterns, residual stream, queries, keys, scores, norms, MLP) and every output, against float32 on
    the CPU. A decoder's greedy continuation is the same text where every greedy choice on the CPU leads by more than
    the tolerance (else a tie may go either way: the generation test compares those steps one by one)."""
    cpu, gpu = loaded(model), loaded(model, DEVICE, precision)
    tol = tolerance(model, precision)
    assert gpu.facts.device.startswith(DEVICE) and gpu.facts.precision == precision
    target = target_for(cpu)
    ours, theirs = gpu.run(TEXT, target, EVERY_HOOK), cpu.run(TEXT, target, EVERY_HOOK)
    assert not ours.fallback
    assert_same_hooks(ours, theirs, tol)
    distributions = targets = None
    if cpu.facts.kind == "encoder-decoder":  # the CPU's distributions at each output position, and the target's ids
        distributions = np.exp(cpu.ablation_outcomes(theirs, [()], "zero").values[0])
        targets = cpu.text.encode(target, "target")
    assert_same_outputs(ours, theirs, tol, distributions, targets)
    if cpu.facts.kind != "decoder" or (not tol.patterns_only and greedy_margin(steps_of(cpu)) > tol.probability):
        assert ours.output_text == theirs.output_text


@pytest.mark.parametrize("model", ["toy-date", "llama", "t5"])
def test_auto_takes_the_gpu_and_a_half_precision_there(tiny_folders, model: str) -> None:
    """aa.load's defaults on a machine with a GPU: CUDA, and bfloat16 for a Hugging Face model (float16 where the GPU
    has no bfloat16); a toy model stays float32. Its patterns read like the same model's float32 ones on the CPU."""
    toy = model.startswith("toy-")
    source = model if toy else str(tiny_folders[model])
    auto, reference = aa.load(source), aa.load(source, device="cpu", precision="float32")
    assert auto.facts.device.startswith("cuda")
    half = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    assert auto.facts.precision == ("float32" if toy else half)
    text, target = (auto.examples[0], None) if toy else (TEXT, target_for(reference))
    ours, theirs = auto.run(text, target=target), reference.run(text, target=target)
    assert ours.names() == theirs.names()  # every pattern (the default hooks)
    atol = 1e-3 if toy else BFLOAT16.pattern  # (trace[name] gives a kept pattern in float16: steps of 5e-4)
    for name in theirs.names():
        np.testing.assert_allclose(ours[name].astype(np.float32), theirs[name].astype(np.float32), atol=atol,
                                   err_msg=name)


def test_the_app_leaves_float32_products_in_full_precision(loaded) -> None:
    """Loading and running models on the GPU turns no TF32 on: float32 products stay float32 (the tolerances above
    assume it; torch's default)."""
    gpu = loaded("llama", DEVICE)
    gpu.run(TEXT, options=EVERY_HOOK)
    assert not torch.backends.cuda.matmul.allow_tf32  # (float32_matmul_precision "high" would have turned it on)


def test_a_gpu_run_keeps_nothing_on_the_gpu(loaded) -> None:
    """Everything a trace holds is on the host: numpy arrays, patterns' sources included (the GPU's memory is free
    for the next run), and a second run gives the first's numbers."""
    gpu = loaded("llama", DEVICE)
    first, second = gpu.run(TEXT, options=EVERY_HOOK), gpu.run(TEXT, options=EVERY_HOOK)
    for name, value in first.captured.items():
        assert isinstance(value, np.ndarray), name
    for name, source in first.pattern_sources.items():
        assert all(isinstance(array, np.ndarray) for array in source.arrays()), name
    for name in first.names():
        assert_close_values(second[name], first[name], FLOAT32, name)
