"""Generation a token at a time on NDIF, simulated (model/ndif/stepper.py): each step's token, probability,
alternatives and attention rows equal the local stepper's, greedy (one request for the whole call) and off the greedy
path (a request from where a choice left it); how many passes a request asks for."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.ndif.opening import open_ndif
from attention_atlas.model.ndif.status import following
from attention_atlas.model.ndif.stepper import Passes
from tests.tiny_hf import build_type

PROMPT = "the quick brown fox"
TOLERANCE = 1e-4


def greedy(logits: torch.Tensor, index: int) -> int:
    return int(logits.argmax())


def second_at_step_two(logits: torch.Tensor, index: int) -> int:
    """The second likeliest token at step 2 (a sampled or forced token), else the likeliest."""
    return int(logits.topk(2).indices[1]) if index == 2 else int(logits.argmax())


def steps_and_requests(runner, choose, n: int = 10) -> tuple[list, int]:
    told: list[str] = []
    with following(told.append):
        steps = list(generate(runner.stepper(PROMPT, RunOptions()), [], n, choose))
    return steps, told.count("NDIF: completed")


def assert_same_steps(ours, theirs) -> None:
    assert [s.token_id for s in ours] == [s.token_id for s in theirs] and len(theirs) == 10
    for mine, local in zip(ours, theirs, strict=True):
        assert abs(mine.probability - local.probability) <= TOLERANCE
        assert list(mine.top_ids) == list(local.top_ids)
        assert mine.self_rows.shape == local.self_rows.shape  # (layers, heads, context)
        assert np.abs(mine.self_rows - local.self_rows).max() <= TOLERANCE


@pytest.mark.slow  # opening a model on NDIF builds and probes its twin and loads nnsight: seconds
@pytest.mark.parametrize("family", ["llama", "gemma2"])  # Llama: grouped-query, rotary; Gemma 2: windows, soft caps
def test_generation_on_ndif_equals_the_local_stepper(folders, tmp_path, family) -> None:
    folder = folders["llama"] if family == "llama" else build_type("gemma2", tmp_path / "gemma2")
    ndif, local = open_ndif(str(folder), simulate=True), load_hf_runner(str(folder))
    ours, requests = steps_and_requests(ndif, greedy)
    assert_same_steps(ours, steps_and_requests(local, greedy)[0])
    assert requests == 1  # every greedy step of the call in one request
    off_path, requests = steps_and_requests(ndif, second_at_step_two)
    assert_same_steps(off_path, steps_and_requests(local, second_at_step_two)[0])
    assert [s.token_id for s in off_path][:2] == [s.token_id for s in ours][:2] != [s.token_id for s in off_path][:3]
    assert requests == 1 + 7  # the greedy path's, then one a token from the token that left it


def test_a_call_asks_for_the_passes_it_may_take_and_a_token_off_the_path_for_one() -> None:
    asked: list[tuple[list[int], int]] = []

    def send(ids: list[int], tokens: int) -> list:  # the reads of remote.step_rows: the greedy token is 9 - pass
        asked.append((list(ids), tokens))
        return [(torch.tensor([*ids, *range(9, 9 - i, -1)]), [torch.zeros(2, len(ids) + i)], torch.zeros(5))
                for i in range(tokens)]

    passes = Passes(send, ["decoder.0.attn.hook_pattern"], row_bytes=8)
    passes.ahead(3)
    rows = passes.forward([1, 2])[1]
    assert asked == [([1, 2], 3)] and rows["decoder.0.attn.hook_pattern"].shape == (1, 2, 1, 2)
    passes.forward([1, 2, 9])
    assert len(asked) == 1  # the greedy path, kept
    passes.forward([1, 2, 9, 5])  # a token off the path (sampled, forced): one pass a request from there
    passes.forward([1, 2, 9, 5, 9])
    assert asked[1:] == [([1, 2, 9, 5], 1), ([1, 2, 9, 5, 9], 1)]
    passes.ahead(2)
    passes.forward([1, 2, 9, 5, 9, 3])  # the next call (a token forced, then generation on from it): as many
    assert asked[-1] == ([1, 2, 9, 5, 9, 3], 2)
