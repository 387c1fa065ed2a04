"""toy-induction's circuit held to computations that share no code with the app's: TransformerLens 3.9 holding the
toy's weights (tests/toy_transformer_lens.py), its heads' query, key and value inputs split and its MLPs' inputs
hooked as the EAP-IG library has them. An edge's EAP score is (its source's output in the corrupted run − in the
clean run) · the gradient of the logit difference with respect to its destination's input, taken here by autograd
in TransformerLens (EAP-IG: averaged over 5 runs whose input is corrupted + k/5 (clean − corrupted)); `evaluate` is
TransformerLens run on the clean text with each destination's input patched by hand: every edge not kept carries
its source's corrupted output in place of its output in this run. And the library's own numbers, recorded on the
same weights by tests/eap_ig_toy_reference.py (tests/data/eap_ig_toy_reference.json).

Tolerance: relative 1e-3; scores also within 1e-5 of the largest score (float32 sums of products)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.masks import causal_mask
from attention_atlas.model.inspect.circuit import Circuit, find_circuit
from attention_atlas.model.registry import load_runner
from tests.circuit_models import fingerprint
from tests.eap_ig_toy_reference import ANSWER, CLEAN, CORRUPTED, TOY, WRONG
from tests.toy_transformer_lens import toy_reference

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "eap_ig_toy_reference.json").read_text())
RTOL = 1e-3
LETTERS = "qkv"


@pytest.fixture(scope="module")
def runner():
    return load_runner(TOY)


@pytest.fixture(scope="module")
def reference(runner):
    model = toy_reference(runner.toy.model).requires_grad_(False)
    model.cfg.use_split_qkv_input = model.cfg.use_attn_result = model.cfg.use_hook_mlp_in = True
    return model


@pytest.fixture(scope="module")
def circuits(runner) -> dict[str, Circuit]:
    return {method: find_circuit(runner, CLEAN, CORRUPTED, ANSWER, WRONG, method, 5) for method in ("EAP", "EAP-IG")}


def _ids(runner, text: str) -> torch.Tensor:
    return torch.tensor([runner.toy.encode_source(text)])


def _labels(runner) -> tuple[int, int]:
    vocab = runner.toy.tokenizer.vocab
    return vocab.index(ANSWER), vocab.index(WRONG)


def _outputs(reference, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every node's output (len, d_model) in TransformerLens's run of `ids`."""
    _, cache = reference.run_with_cache(ids)
    found = {"input": cache["blocks.0.hook_resid_pre"][0]}
    for layer in range(reference.cfg.n_layers):
        found |= {f"a{layer}.h{h}": cache[f"blocks.{layer}.attn.hook_result"][0, :, h]
                  for h in range(reference.cfg.n_heads)}
        found[f"m{layer}"] = cache[f"blocks.{layer}.hook_mlp_out"][0]
    return found


def _destinations(reference) -> dict[str, tuple[str, int | None]]:
    """Every destination's name -> its TransformerLens hook and head (None: the hook holds no heads)."""
    found: dict[str, tuple[str, int | None]] = {}
    for layer in range(reference.cfg.n_layers):
        found |= {f"a{layer}.h{h}<{x}>": (f"blocks.{layer}.hook_{x}_input", h) for x in LETTERS
                  for h in range(reference.cfg.n_heads)}
        found[f"m{layer}"] = (f"blocks.{layer}.hook_mlp_in", None)
    found["logits"] = (f"blocks.{reference.cfg.n_layers - 1}.hook_resid_post", None)
    return found


def _gradients(reference, ids: torch.Tensor, labels: tuple[int, int],
               start: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The logit difference's gradient (len, d_model) with respect to each destination's input, the input node
    replaced by `start` where given."""
    zeros: dict[str, torch.Tensor] = {}

    def add_zero(act: torch.Tensor, hook) -> torch.Tensor:
        zeros[hook.name] = torch.zeros_like(act, requires_grad=True)
        return act + zeros[hook.name]

    hooks = [] if start is None else [("blocks.0.hook_resid_pre", lambda act, hook: start[None])]
    hooks += [(name, add_zero) for name in {name for name, _ in _destinations(reference).values()}]
    logits = reference.run_with_hooks(ids, fwd_hooks=hooks)[0, -1]
    (logits[labels[0]] - logits[labels[1]]).backward()
    return {dest: zeros[name].grad[0] if head is None else zeros[name].grad[0, :, head]
            for dest, (name, head) in _destinations(reference).items()}


def _by_hand(reference, ids: torch.Tensor, labels: tuple[int, int], kept: set[str],
             corrupted: dict[str, torch.Tensor]) -> float:
    """The logit difference of TransformerLens's run of `ids` where each destination reads, for every edge into it
    not in `kept`, its source's corrupted output in place of its output in this run."""
    current: dict[str, torch.Tensor] = {}
    heads = reference.cfg.n_heads

    def keep(act: torch.Tensor, hook) -> None:
        layer = hook.name.split(".")[1]
        if hook.name.endswith("hook_result"):
            current.update({f"a{layer}.h{h}": act[0, :, h] for h in range(heads)})
        else:
            current["input" if hook.name.endswith("resid_pre") else f"m{layer}"] = act[0]

    def patch(act: torch.Tensor, hook) -> torch.Tensor:
        act = act.clone()
        for dest, (name, head) in _destinations(reference).items():
            if name != hook.name:
                continue
            for source in current:  # the nodes before this destination: their outputs are already made
                if f"{source}->{dest}" not in kept:
                    where = (0, slice(None)) if head is None else (0, slice(None), head)
                    act[where] += corrupted[source] - current[source]
        return act

    sources = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.{name}" for layer in range(reference.cfg.n_layers)
                                             for name in ("attn.hook_result", "hook_mlp_out")]
    hooks = [(name, keep) for name in sources]
    hooks += [(name, patch) for name in {name for name, _ in _destinations(reference).values()}]
    logits = reference.run_with_hooks(ids, fwd_hooks=hooks)[0, -1]
    return float(logits[labels[0]] - logits[labels[1]])


def test_transformer_lens_computes_the_toy(runner, reference) -> None:
    """Its logits are the toy's, and its hook_mlp_in (the MLP's own input) is the toy's."""
    model, ids = runner.toy.model, _ids(runner, CLEAN)
    log_probs, captured = capture(model, model.hook_points, ("decoder.*.hook_mlp_in",),
                                  lambda: model(ids, causal_mask(ids.shape[1])))
    logits, cache = reference.run_with_cache(ids)
    torch.testing.assert_close(logits.log_softmax(-1), log_probs, atol=1e-5, rtol=0)
    for layer in range(2):
        np.testing.assert_allclose(captured[f"decoder.{layer}.hook_mlp_in"][0],
                                   cache[f"blocks.{layer}.hook_mlp_in"][0].numpy(), atol=1e-5)


@pytest.mark.parametrize("method", ["EAP", "EAP-IG"])
def test_every_edge_score_is_the_gradient_times_the_difference(runner, reference, circuits, method) -> None:
    ids = {text: _ids(runner, text) for text in (CLEAN, CORRUPTED)}
    clean, corrupted = (_outputs(reference, ids[text]) for text in (CLEAN, CORRUPTED))
    starts = [None] if method == "EAP" else [corrupted["input"] + k / 5 * (clean["input"] - corrupted["input"])
                                             for k in range(5)]
    found = [_gradients(reference, ids[CLEAN], _labels(runner), start) for start in starts]
    gradients = {dest: sum(g[dest] for g in found) / len(found) for dest in found[0]}
    circuit = circuits[method]
    assert len(circuit.scores) == 12 + 5 + 12 * 6 + 10 + 11  # into layer 0's 12 head inputs from the input, its
    # MLP from the input and 4 heads; into layer 1's from those 6 nodes, its MLP from 10; into the logits from 11
    expected = []
    for edge in circuit.scores:
        source, dest = edge.split("->")
        expected.append(float(((corrupted[source] - clean[source]) * gradients[dest]).sum()))
    ours = np.array(list(circuit.scores.values()))
    np.testing.assert_allclose(ours, expected, rtol=RTOL, atol=1e-5 * np.abs(expected).max())


def test_evaluate_is_a_run_patched_by_hand(runner, reference, circuits) -> None:
    circuit = circuits["EAP-IG"]
    corrupted = _outputs(reference, _ids(runner, CORRUPTED))
    induction = {"input->a0.h3<q>", "input->a0.h3<k>", "input->a0.h3<v>", "a0.h3->a1.h2<k>", "input->a1.h2<q>",
                 "input->a1.h2<k>", "input->a1.h2<v>", "a1.h2->logits"}  # every node fed and read: nothing pruned
    for kept in (induction, set(circuit.top(10)), set(circuit.top(30)), set(circuit.scores) - {"m1->logits"}):
        expected = _by_hand(reference, _ids(runner, CLEAN), _labels(runner), kept, corrupted)
        assert circuit.evaluate(kept) == pytest.approx(expected, rel=RTOL, abs=1e-4)
    assert _by_hand(reference, _ids(runner, CLEAN), _labels(runner), set(), corrupted) == pytest.approx(
        circuit.corrupted, rel=RTOL)


def test_the_weights_and_ids_are_those_the_library_read(runner) -> None:
    ours = fingerprint(runner.toy.model)
    for key, value in REFERENCE["fingerprint"].items():
        assert ours[key] == pytest.approx(value, rel=1e-9), f"{key}: toy-induction changed; record it again"
    assert {text: runner.toy.encode_source(text) for text in (CLEAN, CORRUPTED)} == REFERENCE["ids"]


@pytest.mark.parametrize("method", ["EAP", "EAP-IG"])
def test_every_edge_score_is_the_librarys(circuits, method) -> None:
    circuit, theirs = circuits[method], REFERENCE["scores"][method]
    assert circuit.clean == pytest.approx(REFERENCE["clean"], rel=RTOL)
    assert circuit.corrupted == pytest.approx(REFERENCE["corrupted"], rel=RTOL)
    assert list(circuit.scores) == list(theirs)  # the library's edges, named and ordered as its graph
    expected = np.array(list(theirs.values()))
    np.testing.assert_allclose(list(circuit.scores.values()), expected, rtol=RTOL,
                               atol=1e-5 * np.abs(expected).max())


def test_evaluate_is_the_librarys_evaluate_graph(circuits) -> None:
    """Its top-20 circuit, every edge removed alone from the whole graph (its `exact` scores plus the clean run),
    and its top-n circuits."""
    circuit, recorded = circuits["EAP-IG"], REFERENCE["evaluate"]
    assert sorted(circuit.top(recorded["top"]["n"])) == sorted(recorded["top"]["edges"])
    assert circuit.evaluate(recorded["top"]["edges"]) == pytest.approx(recorded["top"]["value"], rel=RTOL)
    edges = list(circuit.scores)
    ours = circuit.evaluate_many([[edge for edge in edges if edge != removed] for removed in edges])
    np.testing.assert_allclose(ours, np.array([REFERENCE["exact"][e] for e in edges]) + REFERENCE["clean"],
                               rtol=RTOL, atol=1e-4)
    ns = [int(n) for n in recorded["curve"]]
    values = circuit.faithfulness(ns) * (circuit.clean - circuit.corrupted) + circuit.corrupted
    np.testing.assert_allclose(values, list(recorded["curve"].values()), rtol=RTOL, atol=1e-4)
