"""Attention sinks (GPT-OSS: a learned logit a head, one more key in every row's softmax whose probability is
dropped): the model opens through the Hugging Face path (its guard proves it), its patterns are transformers' eager
ones in a plain and a summarised run (by the native kernel and by the torch ops), rows sum to 1 less the sink's share,
its prediction and its greedy generation are transformers' own, and a trace file keeps the sinks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.file import NotATraceFile
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_math import compute_head
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.step_hooks import step_names
from tests.tiny_sinks import SINKS, build_gpt_oss

TEXT = "the quick brown fox jumps over the lazy dog the cat sat on the mat"
HOOKS = ("*.hook_pattern", "*.attn.hook_z", "*.hook_attn_out")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_gpt_oss(tmp_path_factory.mktemp("gpt_oss") / "gpt_oss")


@pytest.fixture(scope="module")
def runner(folder):
    return load_hf_runner(str(folder))  # the guard refuses a model whose attention the app gets wrong


@pytest.fixture(scope="module")
def eager(runner, folder):
    """Transformers' eager model on the text's ids: (its output, the ids)."""
    model = type(runner.model).from_pretrained(folder, attn_implementation="eager").eval()
    ids = runner.run(TEXT).ids
    with torch.inference_mode():
        return model, model(input_ids=torch.tensor([ids]), output_attentions=True)


@pytest.fixture(params=["native", "native from torch's scores", "torch ops"])
def kernel(request, monkeypatch) -> str:
    """The CPU's native kernel (making its scores itself where built with AVX-512, or from torch's Q K^T as
    elsewhere), or the torch ops a GPU runs (here on the CPU)."""
    if request.param == "torch ops":
        monkeypatch.setattr(native, "attention_rows", lambda: None)
    elif request.param == "native from torch's scores" and native.attention_rows() is not None:
        monkeypatch.setattr(native.attention_rows(), "from_queries", None)
    return request.param


def _entropy(p: np.ndarray) -> np.ndarray:
    return -np.where(p > 0, p * np.log2(np.where(p > 0, p, 1)), 0).sum(-1)


@pytest.mark.parametrize("summarised", [False, True])
def test_patterns_and_prediction_are_transformers_eager_ones(runner, eager, kernel: str, summarised: bool) -> None:
    """Each layer's pattern (its rows summing to 1 less the sink's share) and the next token's probabilities; a
    summarised run's statistics and thumbnails are the eager patterns' own."""
    _, out = eager
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=summarised))
    assert len(out.attentions) == trace.n_layers("decoder.attn") == 2
    n = len(trace.tokens)
    for layer, reference in enumerate(out.attentions):
        expected = reference[0].numpy()  # (heads, n, n)
        source = trace.pattern_source("decoder.attn", layer)
        np.testing.assert_allclose(source.pattern(dtype=np.float32), expected, atol=1e-5, err_msg=f"layer {layer}")
        np.testing.assert_allclose(source.pattern(heads=[3, 1], rows=[n - 1, 2], dtype=np.float32),
                                   expected[[3, 1]][:, [n - 1, 2]], atol=1e-5)
        shares = source.sink_shares()  # (heads, n)
        np.testing.assert_allclose(shares, 1 - expected.sum(-1), atol=1e-5)
        assert (np.diff(shares.mean(-1)) > 0).all()  # a greater sink logit takes more (SINKS rise head by head)
    statistics = (trace.summaries["decoder.attn"] if summarised else summarise_site(trace, "decoder.attn")).statistics
    entropy = np.stack([_entropy(a[0].numpy()).mean(-1) for a in out.attentions])  # (layers, heads): the keys'
    np.testing.assert_allclose(statistics[..., 0], entropy, atol=1e-5)
    np.testing.assert_allclose(statistics[..., 2], np.stack([a[0, :, :, 0].mean(-1) for a in out.attentions]),
                               atol=1e-5)
    top = trace.outputs["top_next_ids"]
    np.testing.assert_allclose(trace.outputs["top_next_probs"], out.logits[0, -1].softmax(-1)[top].numpy(),
                               atol=1e-5)


def test_a_summarised_run_computes_the_layer_as_the_plain_one(runner, kernel: str) -> None:
    """The summarised run makes each layer's output from the probabilities its summary reads (the sink's share
    left out of the values' weights): hook_z and the attention output are the plain run's."""
    plain = runner.run(TEXT, options=RunOptions(hooks=HOOKS))
    made = runner.run(TEXT, options=RunOptions(hooks=HOOKS, summarised=True))
    for name, value in plain.captured.items():
        if not name.endswith("hook_pattern"):
            np.testing.assert_allclose(made.captured[name], value, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(made.outputs["top_next_probs"], plain.outputs["top_next_probs"], atol=1e-5)


def test_the_sinks_are_each_heads_own(runner) -> None:
    source = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",))).pattern_source("decoder.attn", 1)
    assert isinstance(source.sinks, np.ndarray)  # a trace's arrays are the host's
    np.testing.assert_array_equal(source.sinks, np.array(SINKS, dtype=np.float32))


def test_greedy_generation_is_transformers_own(runner, eager) -> None:
    model, _ = eager
    ids = runner.run(TEXT).ids
    greedy = lambda logits, step: int(logits.argmax())  # noqa: E731
    steps = list(generate(runner.stepper(TEXT, RunOptions()), [], 6, greedy))
    with torch.inference_mode():
        reference = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False, eos_token_id=None,
                                   pad_token_id=0)
    assert [s.token_id for s in steps] == reference[0, len(ids):].tolist()
    rows = steps[-1].self_rows  # (layers, heads, context): the last step's query, with its cache
    assert ((rows.sum(-1) < 1 - 1e-3) & (rows.sum(-1) > 0)).all()  # every row gave a share to its sink


def test_a_trace_file_keeps_the_sinks(runner, eager, tmp_path) -> None:
    """A saved trace's sources keep their sinks (`source:<hook>:sinks`): its patterns read back are eager's, rows
    short of 1 by the sink's share; a file whose sinks are not one a head is refused with a sentence."""
    _, out = eager
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",)))
    trace.save(tmp_path / "sinks.npz")
    read = Trace.load(tmp_path / "sinks.npz")
    for layer, reference in enumerate(out.attentions):
        source = read.pattern_source("decoder.attn", layer)
        np.testing.assert_array_equal(source.sinks, np.array(SINKS, dtype=np.float32))
        np.testing.assert_allclose(source.pattern(dtype=np.float32), reference[0].numpy(), atol=1e-5)
    with np.load(tmp_path / "sinks.npz") as arrays:
        parts = dict(arrays)
    name = next(key for key in parts if key.endswith(":sinks"))
    parts[name] = parts[name][:3]
    np.savez(tmp_path / "bad.npz", **parts)
    with pytest.raises(NotATraceFile, match=r"pattern source of .* has parts of shapes that do not match"):
        Trace.load(tmp_path / "bad.npz")


def test_step_through_puts_each_heads_sink_in_its_softmax(runner) -> None:
    """Step through's recomputation from the weights (model/inspect/head_math.py) takes the head's sink logit into
    every row's softmax as transformers' GPT-OSS eager attention does: its pattern and output equal that function's on
    the same queries, keys and values (unrotated here: the softmax and the sink are what this checks)."""
    names = step_names(runner.facts, "decoder.attn", 1)
    trace = runner.run(TEXT, options=RunOptions(hooks=names.hooks()))
    x = block_input(runner, names.x, trace.captured[names.x])
    source = trace.pattern_sources[Site.of("decoder.attn").pattern_name(1)]
    allowed = np.asarray(source.allowed)
    additive = torch.from_numpy(np.where(allowed, 0.0, torch.finfo(torch.float32).min).astype(np.float32))[None, None]
    for head in range(runner.facts.n_heads):
        weights = replace(head_weights(runner, "decoder.attn", 1, head, len(x), len(x), source), rotary=None)
        assert weights.sink == SINKS[head]
        steps = compute_head(weights, x, x, allowed)
        module = SimpleNamespace(sinks=torch.tensor([weights.sink]), num_key_value_groups=1, training=False)
        q, k, v = (torch.from_numpy(a)[None, None] for a in (steps.q, steps.k, steps.v))  # (1, 1, len, d_head)
        out, pattern = eager_attention_forward(module, q, k, v, additive, scaling=weights.scale)
        np.testing.assert_allclose(steps.pattern, pattern[0, 0].numpy(), atol=1e-6)
        np.testing.assert_allclose(steps.z, out[0, :, 0].numpy(), atol=1e-6)
