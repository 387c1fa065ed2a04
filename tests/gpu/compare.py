"""How a run on a CUDA GPU is held to the same run on the CPU: the tolerances, with why each is what it is, and the
comparisons of traces, summaries and generated steps.

Where a run chooses (a greedy token, the order of the top tokens, a rank), two devices may choose differently where
two tokens are tied to within the devices' rounding: such a choice is accepted where the CPU's own probabilities show
the tie, and nowhere else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.generation.decoding import Step
from attention_atlas.model.core.trace.trace import Trace

ORDINARY = 1e8  # a value at least this large is a mask's fill (-1e9 in the toy models, the dtype's lowest, -inf), not a
# number a model computed (those stay below 1e4 here)


@dataclass(frozen=True)
class Tolerance:
    """How far a GPU's run may be from the CPU's float32 run."""

    relative: float  # a captured value: |gpu - cpu| <= relative x (|cpu| + the largest ordinary |value| of that hook)
    pattern: float  # an attention probability, and a thumbnail's block mean of them (absolute)
    probability: float  # an output probability or cosine, and how close two tokens' probabilities are to be a tie
    statistic: float  # a head statistic (entropy in bits, mean distance in tokens, shares): absolute and relative
    patterns_only: bool = False  # only the attention (patterns, summaries, attention rows) is compared


# float32 on the GPU, TF32 off (conftest.py): the same arithmetic in another order and other kernels. Measured on an
# H100 (torch 2.11): toy and tiny Hugging Face traces within 1.5e-5 of the CPU's; 1e-4 leaves a margin of 6 and is
# still 100 times below any real difference (a wrong mask or scale moves a probability by 1e-2 or more).
FLOAT32 = Tolerance(relative=1e-4, pattern=1e-4, probability=1e-4, statistic=1e-4)

# bfloat16 on the GPU against float32 on the CPU: bfloat16 rounds to 8 significant bits (a relative error up to 2^-8,
# 0.4%), the weights are rounded to it and every layer rounds again. Measured with every tiny model here in bfloat16
# on the CPU against float32: captured values within 1.8% of each hook's largest value, probabilities within 0.005,
# output probabilities within 0.004, thumbnails within 0.008, statistics within 0.004. The GPU adds bfloat16 products
# in the summary (docs/performance.md). Tolerances of 3 to 10 times those: a wrong mask, scale or dtype still fails
# them by far.
BFLOAT16 = Tolerance(relative=0.05, pattern=0.03, probability=0.02, statistic=0.05)
# (not the same hooks: model/hf/discovery.py places hook_attn_out, hook_mlp_out, hook_resid_mid and hook_resid_post
# by comparing its probe's values at float32's precision, so a model loaded in bfloat16 drops them, on either device)

# A mixture of experts in bfloat16: its router picks 2 of 4 experts a token, and on the tests' text two candidates of
# tiny Mixtral's second layer score 6e-4 apart (of 0.25), under bfloat16's step there: a token may take another expert
# on the GPU than on the CPU, which changes every value after that layer's MLP by far more than rounding. Its
# attention (patterns, summaries, the rows of each generated step) reads nothing after it and is compared as ever.
BFLOAT16_ROUTED = replace(BFLOAT16, patterns_only=True)
ROUTED = ("mixtral",)


def tolerance(model: str, precision: str) -> Tolerance:
    """How far `model`'s run in `precision` on the GPU may be from its float32 run on the CPU."""
    if precision == "float32":
        return FLOAT32
    return BFLOAT16_ROUTED if model in ROUTED else BFLOAT16


def scale_of(value: np.ndarray) -> float:
    """The largest ordinary magnitude of a value (masked entries set aside), at least 1e-6."""
    magnitudes = np.abs(value[np.isfinite(value)])
    magnitudes = magnitudes[magnitudes < ORDINARY]
    return max(float(magnitudes.max()) if magnitudes.size else 0.0, 1e-6)


def assert_close_values(gpu: np.ndarray, cpu: np.ndarray, tol: Tolerance, what: str) -> None:
    """A captured value (residuals, queries, scores, log-probabilities …): within `tol.relative` of the CPU's, relative
    to each entry and to the hook's largest ordinary value; masked entries (-inf, the lowest float) alike."""
    gpu, cpu = np.asarray(gpu, dtype=np.float32), np.asarray(cpu, dtype=np.float32)
    assert gpu.shape == cpu.shape, (what, gpu.shape, cpu.shape)
    np.testing.assert_allclose(gpu, cpu, rtol=tol.relative, atol=tol.relative * scale_of(cpu), err_msg=what)


def pattern32(trace: Trace, name: str) -> np.ndarray:
    """(heads, q, k) float32: a pattern kept as its source computed in float32 (`trace[name]` gives float16), or a
    captured one."""
    source = trace.pattern_sources.get(name)
    return source.pattern(dtype=np.float32) if source is not None else np.asarray(trace[name], dtype=np.float32)


def assert_same_hooks(gpu: Trace, cpu: Trace, tol: Tolerance) -> None:
    """The tokens, masks and every hook the two traces hold."""
    assert (gpu.tokens, gpu.ids, gpu.target_ids) == (cpu.tokens, cpu.ids, cpu.target_ids)
    assert gpu.masks.keys() == cpu.masks.keys()
    for site, mask in cpu.masks.items():
        np.testing.assert_array_equal(gpu.masks[site], mask, err_msg=site)
    patterns = {name for name in cpu.names() if name.endswith("hook_pattern")}
    assert patterns and patterns <= set(gpu.names())
    assert sorted(gpu.names()) == sorted(cpu.names()), sorted(set(gpu.names()) ^ set(cpu.names()))
    for name in sorted(cpu.names()):
        if name in patterns:
            np.testing.assert_allclose(pattern32(gpu, name), pattern32(cpu, name), atol=tol.pattern, err_msg=name)
        elif not tol.patterns_only:
            assert_close_values(gpu[name], cpu[name], tol, name)


def assert_same_ranking(cpu_ids: Sequence[int], cpu_probs: np.ndarray, gpu_ids: Sequence[int],
                        gpu_probs: np.ndarray, tie: float) -> None:
    """Two top-k lists of one distribution, each computed on its device: the same probabilities in order, and the
    same tokens, but where two tokens' probabilities are within `tie` and may change places."""
    np.testing.assert_allclose(gpu_probs, cpu_probs, atol=tie)
    on_cpu = {int(i): float(p) for i, p in zip(cpu_ids, cpu_probs, strict=True)}
    for k, token in enumerate(map(int, gpu_ids)):
        if token == int(cpu_ids[k]):
            continue
        if token in on_cpu:  # another place on the CPU's list: as likely there as the CPU's token here
            assert abs(on_cpu[token] - float(cpu_probs[k])) <= tie, (k, token, list(cpu_ids), list(gpu_ids))
        else:  # past the CPU's list: the CPU's last listed token is as likely as its token here
            assert float(cpu_probs[k]) - float(cpu_probs[-1]) <= 2 * tie, (k, token, list(cpu_ids), list(gpu_ids))


def assert_same_choices(gpu_choices: Sequence[int], cpu_probs: np.ndarray, tie: float, what: str) -> None:
    """Tokens the GPU chose as the most likely, position by position: on the CPU's distributions (positions, vocab),
    each is the most likely or within `tie` of it."""
    cpu_probs = np.asarray(cpu_probs, dtype=np.float64)
    chosen = cpu_probs[np.arange(len(gpu_choices)), np.asarray(gpu_choices)]
    short = cpu_probs.max(-1) - chosen
    assert (short <= tie).all(), f"{what}: the GPU chose tokens the CPU rates {short.max():.2e} below its choice"


def assert_same_ranks(gpu_ranks: np.ndarray, targets: Sequence[int], cpu_probs: np.ndarray, tie: float) -> None:
    """Each target token's rank among all tokens (1 = the most likely), from the GPU: what the CPU's distributions
    give, counting the tokens within `tie` of the target's probability either way."""
    cpu_probs = np.asarray(cpu_probs, dtype=np.float64)
    target = cpu_probs[np.arange(len(targets)), np.asarray(targets)][:, None]
    lowest = 1 + (cpu_probs > target + tie).sum(-1)
    highest = 1 + (cpu_probs > target - tie).sum(-1)
    assert ((lowest <= gpu_ranks) & (gpu_ranks <= highest)).all(), (gpu_ranks, lowest, highest)


def assert_same_outputs(gpu: Trace, cpu: Trace, tol: Tolerance, distributions: np.ndarray | None = None,
                        targets: Sequence[int] | None = None) -> None:
    """A run's outputs: probabilities and cosines close; the tokens it chose the CPU's, or tied with them on the CPU's
    `distributions` (positions, vocab) of the positions the outputs are of (predicted, forced choice and ranks:
    `targets` the forced tokens' ids)."""
    assert gpu.outputs.keys() == cpu.outputs.keys()
    assert (gpu.output_kind, gpu.cautions) == (cpu.output_kind, cpu.cautions)
    if tol.patterns_only:
        return
    a, b = gpu.outputs, cpu.outputs
    for key in sorted(b):
        if key == "log_probs":
            assert_close_values(a[key], b[key], tol, key)
        elif key in ("top_next_probs", "forced_probs", "forced_choice_probs", "token_similarity"):
            np.testing.assert_allclose(a[key], b[key], atol=tol.probability, err_msg=key)
        elif key == "top_next_ids":
            assert_same_ranking(b[key], b["top_next_probs"], a[key], a["top_next_probs"], tol.probability)
        elif key == "predicted_ids":
            assert distributions is not None, "predicted ids are compared on the CPU's distributions"
            assert_same_choices(a[key], distributions, tol.probability, key)
        elif key == "forced_ranks":
            assert distributions is not None and targets is not None
            assert_same_ranks(a[key], targets, distributions, tol.probability)
        elif key == "forced_tokens":
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        elif key in ("top_next_tokens", "predicted_tokens", "forced_choice_tokens"):  # the ids' strings
            ids = "top_next_ids" if key == "top_next_tokens" else "predicted_ids"  # where those differ: tied, above
            same = a[ids] == b[ids] if ids in b else np.ones(len(b[key]), dtype=bool)
            np.testing.assert_array_equal(a[key][same], b[key][same], err_msg=key)
        else:
            raise AssertionError(f"output {key!r} is compared nowhere: add it to tests/gpu/compare.py")


def assert_same_summary(gpu: SiteSummary, cpu: SiteSummary, tol: Tolerance, what: str) -> None:
    """One attention site's summary made in the run (thumbnails, head statistics, the rollout's factors)."""
    np.testing.assert_allclose(gpu.thumbnails, cpu.thumbnails, atol=tol.pattern, err_msg=f"{what} thumbnails")
    np.testing.assert_allclose(gpu.statistics, cpu.statistics, rtol=tol.statistic, atol=tol.statistic,
                               err_msg=f"{what} statistics")  # NaN where a measure needs one sequence, on both
    np.testing.assert_array_equal(gpu.rollout_starts, cpu.rollout_starts, err_msg=what)
    if cpu.layer_flows is None:
        assert gpu.layer_flows is None and gpu.rollout is None
        return
    assert gpu.layer_flows is not None, f"{what}: no rollout factors on the GPU"
    assert [f.shape for f in gpu.layer_flows] == [f.shape for f in cpu.layer_flows]
    for layer, (a, b) in enumerate(zip(gpu.layer_flows, cpu.layer_flows, strict=True)):
        np.testing.assert_allclose(a, b, atol=tol.pattern, err_msg=f"{what} layer {layer} rollout factor")
    np.testing.assert_allclose(gpu.rollout, cpu.rollout, atol=tol.pattern, err_msg=f"{what} rollout")


def assert_same_steps(gpu: Sequence[Step], cpu: Sequence[Step], tol: Tolerance) -> None:
    """Generated steps, the GPU's made to take the CPU's tokens (the same contexts): at each, the GPU's own first
    choice is the CPU's token or tied with it, and the probabilities and attention rows are the CPU's."""
    assert [s.token_id for s in gpu] == [s.token_id for s in cpu]
    for index, (a, b) in enumerate(zip(gpu, cpu, strict=True)):
        if not tol.patterns_only:
            assert int(a.top_ids[0]) == b.token_id or float(a.top_probs[0]) - a.probability <= tol.probability, index
            assert abs(a.probability - b.probability) <= tol.probability, index
            assert_same_ranking(b.top_ids, b.top_probs, a.top_ids, a.top_probs, tol.probability)
        np.testing.assert_allclose(a.self_rows, b.self_rows, atol=tol.pattern, err_msg=f"step {index} self rows")
        assert (a.cross_rows is None) == (b.cross_rows is None), index
        if b.cross_rows is not None:
            np.testing.assert_allclose(a.cross_rows, b.cross_rows, atol=tol.pattern, err_msg=f"step {index} cross")


def greedy_margin(steps: Sequence[Step]) -> float:
    """The smallest lead of a greedy step's token over the next most likely (1 where nothing was generated)."""
    return min((float(s.top_probs[0] - s.top_probs[1]) for s in steps), default=1.0)
