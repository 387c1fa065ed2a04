"""One head recomputed from its weights (model/inspect/head_weights.py, model/inspect/head_math.py) equals what
the model computed: the from-scratch models (encoder self, decoder self, cross), MiniLM, SmolLM2 and tiny GPT-2,
Llama (GQA), T5, BART and Marian models."""

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_math import HeadSteps, compute_head, output_projection, softmax_rows
from attention_atlas.model.inspect.head_weights import HeadWeights, head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.step_hooks import step_names
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import TYPES, build_type

TOL = 1e-5
FLOAT16_STEP = 2.0 ** -11  # float16's relative rounding step: HF patterns are kept in float16


def _recompute(runner, text: str, target: str | None, site: str, layer: int, head: int
               ) -> tuple[Trace, HeadWeights, HeadSteps, str]:
    names = step_names(runner.facts, site, layer)
    trace = runner.run(text, target, RunOptions(hooks=names.hooks()))
    x = block_input(runner, names.x, trace.captured[names.x])
    x_kv = next(trace.captured[m] for m in names.memory if m in trace.captured) if names.memory else x
    source = trace.pattern_sources.get(Site.of(site).pattern_name(layer))  # the layer's own mask and scale
    mask = trace.masks[site] if source is None else np.asarray(source.allowed)
    weights = head_weights(runner, site, layer, head, len(x), len(x_kv), source)
    return trace, weights, compute_head(weights, x, x_kv, mask), names.attention


def _check(runner, text: str, site: str, layer: int, target: str | None = None) -> None:
    """Every head of the layer: pattern, scores and output as the model's (float32, 1e-5), and W_O."""
    zs = []
    for head in range(runner.facts.n_heads):
        trace, weights, steps, prefix = _recompute(runner, text, target, site, layer, head)
        captured = trace.captured
        pattern = trace.pattern(site, layer)[head]
        model_scores = captured[f"{prefix}.hook_attn_scores"][head]
        assert np.abs(steps.scores - model_scores).max() < TOL * max(1.0, np.abs(model_scores).max())
        if pattern.dtype == np.float16:  # the app keeps HF patterns in float16: within its rounding, and the
            assert np.all(np.abs(steps.pattern - pattern) <= FLOAT16_STEP * np.abs(pattern) + 1e-7)
            float32 = softmax_rows(np.where(steps.masked > -np.inf, model_scores, -np.inf).astype(np.float32))
            assert np.abs(steps.pattern - float32).max() < TOL  # model's float32 scores through the softmax
        else:
            assert pattern.dtype == np.float32 and np.abs(steps.pattern - pattern).max() < TOL
        assert np.abs(steps.z - captured[f"{prefix}.hook_z"][head]).max() < TOL
        if steps.rot_q is not None:
            assert np.abs(steps.rot_q - captured[f"{prefix}.hook_rot_q"][head]).max() < TOL * 10
            assert np.abs(steps.rot_k - captured[f"{prefix}.hook_rot_k"][weights.kv_head]).max() < TOL * 10
            assert np.abs(steps.q - steps.rot_q).max() > 1e-3  # the rotation did something
        zs.append(steps.z)
    names = step_names(runner.facts, site, layer)
    if names.projected:  # W_O's output is what the block adds (not a norm of it)
        assert np.abs(output_projection(np.stack(zs), weights) - captured[names.out]).max() < TOL


@pytest.mark.parametrize(("model_id", "site", "layer"), [
    ("toy-date", "encoder.attn", 1), ("toy-date", "decoder.attn", 0), ("toy-date", "decoder.cross_attn", 1),
    ("toy-gpt-date", "decoder.attn", 2),
])
def test_from_scratch_heads(model_id: str, site: str, layer: int) -> None:
    runner = load_runner(model_id)
    _check(runner, runner.examples[0], site, layer)


@pytest.mark.slow  # two real models, every head
def test_minilm_and_smollm2() -> None:
    _check(load_runner("minilm"), "The cat sat on the mat because it was tired.", "encoder.attn", 2)
    smollm2 = load_runner("smollm2")
    _check(smollm2, "The capital of France is", "decoder.attn", 5)
    _, weights, _, _ = _recompute(smollm2, "The capital of France is", None, "decoder.attn", 5, 4)
    assert (weights.n_heads, weights.n_kv_heads, weights.kv_head) == (9, 3, 1)  # query head 4 reads kv head 1


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5", "bart", "marian"])
def test_tiny_hugging_face_heads(runners, family: str) -> None:
    runner = runners[family]
    text = "the quick brown fox jumps over the lazy dog"
    target = "the cat sat" if runner.facts.kind == "encoder-decoder" else None
    for site in runner.run(text, target, RunOptions(hooks=("*.hook_pattern",))).sites():
        _check(runner, text, site, 1, target)


def test_what_each_family_does_around_the_scores(runners) -> None:
    text = "the quick brown fox"
    _, llama, _, _ = _recompute(runners["llama"], text, None, "decoder.attn", 0, 3)
    assert (llama.kv_head, llama.rotary is not None, llama.position_bias) == (1, True, None)  # 4 heads on 2
    _, t5, _, _ = _recompute(runners["t5"], text, "the cat", "encoder.attn", 1, 2)
    assert t5.scale == 1.0 and "does not scale" in t5.scale_text and np.abs(t5.position_bias).max() > 0
    _, gpt2, _, _ = _recompute(runners["gpt2"], text, None, "decoder.attn", 0, 1)
    assert gpt2.scale == pytest.approx(8 ** -0.5) and gpt2.w_q.shape == (32, 8) and gpt2.w_o.shape == (32, 32)


def test_the_page_asks_only_for_hooks_the_model_offers(runners) -> None:
    """Every name the step-through captures is in the vocabulary and offered by the model (of cross-attention's
    two memory names, one), so that a page's request never silently misses a step."""
    from attention_atlas.model.core.trace.hook_names import in_vocabulary

    models = {f"tiny {family}": (runner, set(runner.taps)) for family, runner in runners.items()}
    for toy in ("toy-date", "toy-gpt-date"):
        runner = load_runner(toy)
        models[toy] = runner, set(runner.toy.model.hook_points)
    for label, (runner, offered) in models.items():
        facts = runner.facts
        sites = [site for site, present in [("encoder.attn", facts.n_encoder_layers), ("decoder.attn",
                 facts.n_decoder_layers), ("decoder.cross_attn", facts.kind == "encoder-decoder")] if present]
        for site in sites:
            names = step_names(facts, site, 1)
            wanted = set(names.hooks()) - set(names.memory)
            if facts.positional != "rotary":
                wanted -= {f"{names.attention}.hook_rot_q", f"{names.attention}.hook_rot_k"}
            assert all(in_vocabulary(name) for name in names.hooks()), label
            assert wanted <= offered, (label, site, wanted - offered)
            assert not names.memory or set(names.memory) & offered, label


@pytest.mark.parametrize("model_type", TYPES)
def test_every_model_type_recomputes_its_heads(tmp_path, model_type: str) -> None:
    """Fused projections, partial and interleaved rotations, query/key norms, soft-capping, sliding windows (layer
    0 slides in Gemma 3, layer 1 does not), pre-scaled queries (OPT): every head of both layers as the model's."""
    runner = load_hf_runner(str(build_type(model_type, tmp_path / model_type)))
    text = "the quick brown fox jumps over the lazy dog"
    target = "the cat sat" if runner.facts.kind == "encoder-decoder" else None
    for site in runner.run(text, target, RunOptions(hooks=("*.hook_pattern",))).sites():
        for layer in (0, 1):
            _check(runner, text, site, layer, target)
