"""The summary made in the run (RunOptions.summarised: thumbnails, head statistics, the rollout's factors) on the GPU
is the CPU's, in float32 and in bfloat16 (where the GPU's Q Kᵀ and P V run in bfloat16, docs/performance.md), with the
layer outputs made from the same probabilities; and a summarised run waits for the GPU a few times a run, never a
layer or a block of rows (`bench.gpu_capture`'s count: torch's sync debug mode)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.heads import ATTENTION
from attention_atlas.model.hf.loading import load_hf_runner
from bench.gpu_ways import count_synchronisations, use_attention, ways_of, with_blocks
from tests.gpu.compare import assert_same_hooks, assert_same_summary, tolerance
from tests.gpu.models import DEVICE, PRECISION_NAMES, TEXT, TINY, target_for
from tests.tiny_hf import build

SUMMARISED = RunOptions(hooks=("*.hook_pattern", "*attn_out", "*.hook_resid_post"), summarised=True)
SYNC_TOKENS = 256  # random tokens of the runs counted: one block of rows a layer at the GPU's sizes, 16 at 16 rows
SMALL_BLOCK = (16, 1)  # rows, MiB: bench.gpu_capture's BENCH_BLOCKS form
MOST_SYNCS = 10  # a summarised run's waits beyond the bare forward's: the mask's spans, the copies of the summary and
# of the kept sources at the end (docs/performance.md, "No wait for the GPU a block"): "a few a run" in the benchmark


@pytest.mark.parametrize("precision", PRECISION_NAMES)
@pytest.mark.parametrize("model", TINY)
def test_a_summary_made_on_the_gpu_is_the_cpus(loaded, model: str, precision: str) -> None:
    """Every site (self-attention, cross-attention; GQA, T5's bias, sliding windows, soft-capping) summarised on the
    GPU against the same run summarised on the CPU (float32, the native kernel where it is built); the layer outputs
    the summarised run computes from those probabilities (no fused kernel) are the CPU's too."""
    cpu, gpu = loaded(model), loaded(model, DEVICE, precision)
    tol = tolerance(model, precision)
    target = target_for(cpu)
    ours, theirs = gpu.run(TEXT, target, SUMMARISED), cpu.run(TEXT, target, SUMMARISED)
    assert set(ours.summaries) == set(theirs.summaries) == set(theirs.sites())
    for site, summary in theirs.summaries.items():
        assert_same_summary(ours.summaries[site], summary, tol, f"{model} {site}")
    assert_same_hooks(ours, theirs, tol)


@pytest.fixture(scope="module")
def llamas(tmp_path_factory) -> dict[int, Path]:
    """Tiny Llamas of 2 and of 12 layers, long enough for SYNC_TOKENS."""
    root = tmp_path_factory.mktemp("sync")
    return {layers: build("llama", root / f"llama{layers}", num_hidden_layers=layers,
                          max_position_embeddings=2 * SYNC_TOKENS) for layers in (2, 12)}


def synchronisations(model: torch.nn.Module, implementation: str, work: Callable[[], object]) -> Counter[str]:
    """The host's waits for the GPU in one run of `work` (after one run that warms it up), by the line that waited."""
    use_attention(model, implementation)
    try:
        work()
        return count_synchronisations(work)
    finally:
        use_attention(model, ATTENTION)


def test_a_summarised_run_waits_a_few_times_a_run_never_a_layer_or_a_block(llamas) -> None:
    """bench.gpu_capture's inputs (SYNC_TOKENS random tokens, the causal mask as an additive array): the summarised
    capture's waits beyond the bare sdpa forward's are at most MOST_SYNCS, the same with 12 layers as with 2, and the
    same in blocks of 16 rows (16 blocks a layer) as in one block a layer."""
    found = {}
    for layers, folder in llamas.items():
        runner = load_hf_runner(str(folder), device=DEVICE)
        ways = ways_of(runner, SYNC_TOKENS, torch.device(DEVICE))
        (bare_way, bare), (summary_way, summary) = ways["sdpa"], ways["capture + summary"]
        small = with_blocks(*SMALL_BLOCK, summary)
        found[layers] = {"sdpa": synchronisations(runner.model, bare_way, bare),
                         "summary": synchronisations(runner.model, summary_way, summary),
                         "small blocks": synchronisations(runner.model, summary_way, small)}
    said = {layers: {way: dict(lines) for way, lines in ways.items()} for layers, ways in found.items()}
    total = {layers: {way: sum(lines.values()) for way, lines in ways.items()} for layers, ways in found.items()}
    extra = {layers: counts["summary"] - counts["sdpa"] for layers, counts in total.items()}
    for counts in total.values():
        assert counts["small blocks"] == counts["summary"], f"a wait a block of rows: {said}"
    assert extra[12] <= extra[2], f"a wait a layer: {said}"
    assert extra[2] <= MOST_SYNCS, f"more than a few waits a run: {said}"
