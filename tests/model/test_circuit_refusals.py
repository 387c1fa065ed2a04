"""What a circuit refuses, each in a sentence, rather than a graph the model does not have or a wrong number: models
whose residual stream is not the sum of the graph's nodes (toys, encoders, encoder-decoders, hybrids, parallel
blocks, post-norm, norms on each sublayer's output), models without the hooks the graph edits, heads of another
kind (latent attention), heads computed again that are not the model's or a stream that does not add up (made so
here by changing what the graph reads), work past the limit, and inputs that do not fit."""

from __future__ import annotations

import numpy as np
import pytest

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect import circuit_pass
from attention_atlas.model.inspect.circuit import find_circuit
from attention_atlas.model.inspect.circuit_heads import layer_heads
from attention_atlas.model.registry import load_runner
from tests.circuit_models import ANSWER, CLEAN, CORRUPTED, WRONG, build_circuit_model
from tests.tiny_hf import build, build_type
from tests.tiny_hybrids import build_hybrid

TEXTS = ("the cat sat on the mat", "the dog sat on the mat")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_hf_runner(str(build_circuit_model("gpt2", tmp_path_factory.mktemp("gpt2"))))


def test_a_toy_is_refused() -> None:
    with pytest.raises(UserError, match="from-scratch toy: circuits are found in Hugging Face decoders"):
        find_circuit(load_runner("toy-gpt-date"), "march 3 2021", "march 4 2021", "2", "1")


@pytest.mark.parametrize(("family", "kind"), [("bert", "encoder"), ("t5", "encoder-decoder")])
def test_encoders_and_encoder_decoders_are_refused(family, kind, tmp_path) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    with pytest.raises(UserError, match=f"is an {kind}: the circuit's graph .* is a decoder's"):
        find_circuit(runner, *TEXTS, "fox", "lazy")


def test_a_hybrid_is_refused(tmp_path) -> None:
    runner = load_hf_runner(str(build_hybrid("lfm2", tmp_path / "lfm2")))
    with pytest.raises(UserError, match=r"is a hybrid: .* a circuit's graph cannot split the stream into parts"):
        find_circuit(runner, *TEXTS, "fox", "lazy")


@pytest.mark.parametrize(("model_type", "overrides", "layout"), [
    ("gpt_neox", {}, "pre-norm, attention and MLP in parallel"),
    ("opt", {"do_layer_norm_before": False}, "post-norm: a norm after each residual sum"),
    ("olmo2", {}, "a norm on each sublayer's output"),
])
def test_blocks_whose_stream_is_not_the_graphs_sum_are_refused(model_type, overrides, layout, tmp_path) -> None:
    runner = load_hf_runner(str(build_type(model_type, tmp_path / model_type, **overrides)))
    with pytest.raises(UserError, match=f"blocks are {layout}.*: the circuit's graph needs each block to read"):
        find_circuit(runner, *TEXTS, "fox", "lazy")


def test_a_model_without_the_hooks_the_graph_edits_is_refused(tmp_path) -> None:
    """A pre-norm OPT: its MLP is no module of its own whose output or input could be edited."""
    runner = load_hf_runner(str(build_type("opt", tmp_path / "opt")))
    assert runner.facts.norm == "pre-norm (LayerNorm)"
    with pytest.raises(UserError, match=r"offers no decoder\.0\.hook_resid_mid, decoder\.0\.hook_mlp_out"):
        find_circuit(runner, *TEXTS, "fox", "lazy")


def test_latent_attention_is_refused(mla_runners) -> None:
    with pytest.raises(UserError, match="has multi-head latent attention: its heads do not read the stream"):
        find_circuit(mla_runners["deepseek_v2"], *TEXTS, "fox", "lazy")


def test_heads_that_are_not_the_models_are_refused(gpt2, monkeypatch) -> None:
    """A head's query weights changed where the graph computes the heads again: its z is no longer the model's."""
    def changed(runner, layer, length, device):
        found = layer_heads(runner, layer, length, device)
        found.w["q"][1] *= 1.5
        return found

    monkeypatch.setattr(circuit_pass, "layer_heads", changed)
    with pytest.raises(UserError, match="The heads of layer 0, computed again from their weights, differ from the "
                                        "model's own"):
        find_circuit(gpt2, CLEAN, CORRUPTED, ANSWER, WRONG)


def test_a_stream_that_is_not_its_nodes_sum_is_refused(gpt2, monkeypatch) -> None:
    """W_O's bias read wrong: what the attention adds is no longer its heads' outputs and that bias."""
    def changed(runner, layer, length, device):
        found = layer_heads(runner, layer, length, device)
        found.b["o"] = found.b["o"] + 0.5
        return found

    monkeypatch.setattr(circuit_pass, "layer_heads", changed)
    with pytest.raises(UserError, match="what attention 0 adds to the residual stream differs from its nodes'"):
        find_circuit(gpt2, CLEAN, CORRUPTED, ANSWER, WRONG)


def test_work_past_the_limit_is_refused_before_any_run(gpt2) -> None:
    with pytest.raises(UserError, match=r"holds 5,632 numbers a run \(16 nodes x tokens x d_model 32\); the limit "
                                        "here is 1,000"):
        find_circuit(gpt2, CLEAN, CORRUPTED, ANSWER, WRONG, max_values=1000)


@pytest.mark.parametrize(("texts", "answers", "method", "steps", "message"), [
    ((CLEAN, "the fox sat"), (ANSWER, WRONG), "EAP-IG", 5, "must have as many tokens: the clean one has 11"),
    ((CLEAN, CORRUPTED), ("cat dog", WRONG), "EAP-IG", 5, "The answer 'cat dog' must be one token"),
    ((CLEAN, CLEAN), (ANSWER, WRONG), "EAP-IG", 5, "give the same logit difference 'cat' − 'fox'"),
    ((CLEAN, CORRUPTED), (ANSWER, WRONG), "ACDC", 5, "Unknown method 'ACDC': choose one of EAP, EAP-IG"),
    ((CLEAN, CORRUPTED), (ANSWER, WRONG), "EAP-IG", 0, "EAP-IG takes 1 to 100 steps, not 0"),
])
def test_inputs_that_do_not_fit_are_refused(gpt2, texts, answers, method, steps, message) -> None:
    with pytest.raises(UserError, match=message):
        find_circuit(gpt2, *texts, *answers, method, steps)


def test_edges_and_sizes_outside_the_graph_are_refused(gpt2) -> None:
    circuit = find_circuit(gpt2, CLEAN, CORRUPTED, ANSWER, WRONG, "EAP")
    with pytest.raises(UserError, match=r"'a9\.h0->logits' is not an edge of this model's graph"):
        circuit.evaluate(["a9.h0->logits"])
    with pytest.raises(UserError, match="This graph has 262 edges: choose between 0 and that many, not 263"):
        circuit.top(263)
    assert np.isfinite(circuit.faithfulness([262])).all()
