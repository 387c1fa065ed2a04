"""Circuits on toy-induction (a pre-norm decoder written from scratch): the induction circuit found where a person
expects it, the post-norm and encoder-decoder toys refused, and the hook the graph edits (`hook_mlp_in`, the MLP's
own input) changing the MLP's input alone.

The prompt pairs read the toy's probe letters once and then their first four again: clean "kfzqbmxrtj" + "kfzq", whose
answer is the letter after the first 'q' ('b'), the induction head (a1.h2) attending there from the last 'q'.
Corrupting the first half ('q' and 'm' swapped: 'x' now follows 'q') moves only where the earlier 'q' stands, which
the induction head finds through its keys, written by the layer-0 heads that look at the previous token (a0.h1 and
a0.h3). Corrupting the second half (its last 'q' made an 'm', whose letter after is 'x') changes what the head looks
for, its query, read from the current token through MLP 0."""

from __future__ import annotations

import random
import string
from statistics import median

import numpy as np
import pytest
import torch

from attention_atlas.model.core.capture.hooks import editing
from attention_atlas.model.core.capture.record import Captured, capture
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import causal_mask
from attention_atlas.model.inspect import circuit_pass
from attention_atlas.model.inspect.circuit import Circuit, find_circuit
from attention_atlas.model.inspect.circuit_heads import layer_heads
from attention_atlas.model.registry import load_runner

CLEAN = "kfzqbmxrtjkfzq"
FIRST_HALF, SECOND_HALF = "kfzmbqxrtjkfzq", "kfzqbmxrtjkfzm"  # either way, 'x' is the induction answer


@pytest.fixture(scope="module")
def runner():
    return load_runner("toy-induction")


def _arrays(found: dict[str, Captured]) -> dict[str, np.ndarray]:
    """A toy model's captured values, every one an array (a toy computes its patterns: none is a PatternSource)."""
    arrays = {name: value for name, value in found.items() if isinstance(value, np.ndarray)}
    assert arrays.keys() == found.keys()
    return arrays


def _patterns(runner, text: str) -> dict[str, np.ndarray]:
    model = runner.toy.model
    ids = torch.tensor([runner.toy.encode_source(text)])
    _, found = capture(model, model.hook_points, ("decoder.*.attn.hook_pattern",),
                       lambda: model(ids, causal_mask(ids.shape[1])))
    return {name: value[0] for name, value in _arrays(found).items()}  # (heads, len, len) each


def _rank(circuit: Circuit, edge: str) -> int:
    return sorted(circuit.scores, key=lambda e: -abs(circuit.scores[e])).index(edge)


def test_the_texts_are_read_by_induction(runner) -> None:
    """a1.h2 looks from the last 'q' at the letter after the earlier one (position 5 after <s>; 7 once swapped);
    a0.h1 and a0.h3 look at the previous token more than the other layer-0 heads do."""
    clean, swapped = _patterns(runner, CLEAN), _patterns(runner, FIRST_HALF)
    assert clean["decoder.1.attn.hook_pattern"][2, -1, 5] > 0.9
    assert swapped["decoder.1.attn.hook_pattern"][2, -1, 7] > 0.9
    first = clean["decoder.0.attn.hook_pattern"]  # (heads, len, len)
    previous = [float(np.mean([first[h, i, i - 1] for i in range(1, 11)])) for h in range(4)]  # the first half
    assert min(previous[1], previous[3]) > 0.4 > max(previous[0], previous[2]), previous


def test_the_first_half_corrupted_finds_the_previous_token_heads_key_edge(runner) -> None:
    circuit = find_circuit(runner, CLEAN, FIRST_HALF, "b", "x", "EAP-IG", 5)
    assert circuit.clean > 10 > -10 > circuit.corrupted  # 'b' over 'x' when clean, 'x' over 'b' when corrupted
    assert "a0.h3->a1.h2<k>" in circuit.top(20)
    between = [e for e in circuit.scores if e.startswith("a0.") and "->a1." in e]  # layer-0 heads into layer 1
    assert max(between, key=lambda e: abs(circuit.scores[e])) == "a0.h3->a1.h2<k>"
    assert _rank(circuit, "a0.h3->a1.h2<k>") == 11 and _rank(circuit, "a0.h1->a1.h2<k>") == 13  # of 110
    assert circuit.scores["a0.h3->a1.h2<k>"] < 0  # it carries the clean answer
    faithful = circuit.faithfulness([10, 20, 30, 50])
    np.testing.assert_allclose(faithful, [0.362, 0.824, 0.905, 1.032], atol=2e-3)


def test_the_second_half_corrupted_finds_the_query_edge(runner) -> None:
    circuit = find_circuit(runner, CLEAN, SECOND_HALF, "b", "x", "EAP-IG", 5)
    ranked = sorted(circuit.scores, key=lambda e: -abs(circuit.scores[e]))
    assert ranked[:2] == ["m0->a1.h2<q>", "input->m0"]
    largest = abs(circuit.scores[ranked[0]])
    keys = [e for e in circuit.scores if e.startswith("a0.") and e.endswith("->a1.h2<k>")]
    assert max(abs(circuit.scores[e]) for e in keys) < 0.01 * largest  # the keys are the same in both runs
    faithful = circuit.faithfulness([10, 15, 20])
    np.testing.assert_allclose(faithful, [0.795, 1.069, 1.068], atol=2e-3)


def test_seeded_first_half_corruptions_find_a_key_edge_from_layer_0(runner) -> None:
    """Eight random letter strings read twice, the earlier copy of the last letter swapped with another: the
    largest layer-0 head's edge into a1.h2's key ranks among the top 10 of 110 by |score| in the middle case."""
    rng, ranks = random.Random(7), []
    for _ in range(8):
        letters = rng.sample(string.ascii_lowercase, 10)
        k = rng.randint(2, 8)  # the second half: letters[:k]; the answer: letters[k]
        j = rng.choice([i for i in range(9) if abs(i - (k - 1)) > 1])
        swapped = letters.copy()
        swapped[k - 1], swapped[j] = swapped[j], swapped[k - 1]
        circuit = find_circuit(runner, "".join(letters + letters[:k]), "".join(swapped + letters[:k]),
                               letters[k], swapped[j + 1], "EAP-IG", 5)
        ranks.append(min(_rank(circuit, f"a0.h{h}->a1.h2<k>") for h in range(4)))
    assert median(ranks) <= 10 and max(ranks) < 25, ranks


def test_hook_mlp_in_edits_the_mlps_input_alone(runner) -> None:
    """An edit of decoder.0.hook_mlp_in changes what MLP 0 adds, and not the stream it adds to."""
    model = runner.toy.model
    ids = torch.tensor([runner.toy.encode_source(CLEAN)])
    hooks = ("decoder.0.hook_resid_mid", "decoder.0.hook_mlp_out", "decoder.0.hook_resid_post")

    def run(edits: dict) -> dict[str, np.ndarray]:
        with editing(edits, {}):
            return _arrays(capture(model, model.hook_points, hooks, lambda: model(ids, causal_mask(ids.shape[1])))[1])

    shift = torch.linspace(-1, 1, model.cfg.d_model)  # not constant: a LayerNorm removes a constant
    plain, edited = run({}), run({"decoder.0.hook_mlp_in": lambda x: x + shift})
    np.testing.assert_array_equal(edited["decoder.0.hook_resid_mid"], plain["decoder.0.hook_resid_mid"])
    assert np.abs(edited["decoder.0.hook_mlp_out"] - plain["decoder.0.hook_mlp_out"]).max() > 0.1
    np.testing.assert_allclose(edited["decoder.0.hook_resid_post"] - edited["decoder.0.hook_mlp_out"],
                               plain["decoder.0.hook_resid_mid"], atol=1e-5)


@pytest.mark.parametrize(("change", "message"), [
    (lambda heads: heads.w.update(q=heads.w["q"] * 1.5), "The heads of layer 0, computed again from their weights"),
    (lambda heads: heads.b.update(o=heads.b["o"] + 0.5), "what attention 0 adds to the residual stream differs"),
])
def test_the_toys_graph_is_proven_on_its_run(runner, monkeypatch, change, message) -> None:
    """Its heads computed again must be its own, and each layer's output its nodes' sum: the queries' weights or
    W_O's bias read wrong where the graph computes the heads again is refused, as in a Hugging Face model. (New
    tensors: the layer's bias may share the model's memory.)"""
    def changed(*args):
        found = layer_heads(*args)
        change(found)
        return found

    monkeypatch.setattr(circuit_pass, "layer_heads", changed)
    with pytest.raises(UserError, match=message):
        find_circuit(runner, CLEAN, FIRST_HALF, "b", "x")


@pytest.mark.parametrize(("toy", "texts", "answers", "message"), [
    ("toy-gpt-date", ("march 3 2021", "march 4 2021"), ("2", "1"),
     "toy-gpt-date is a from-scratch toy: .* its blocks are post-norm: a norm after each residual sum"),
    ("toy-date", ("march 3 2021", "march 4 2021"), ("2", "1"), "toy-date is an encoder-decoder: the circuit's graph"),
])
def test_toys_without_the_graph_are_refused(toy, texts, answers, message) -> None:
    with pytest.raises(UserError, match=message):
        find_circuit(load_runner(toy), *texts, *answers)
