"""Circuits in the other pre-norm decoder families (the library's numbers hold GPT-2 and Llama: test_circuit_reference):
each tiny model, its weights drawn large enough that the two texts' logit differences part, is proven as the graph on
its runs (the heads computed again equal its own z, the stream adds up), and removing an edge into the logits and an
edge into an MLP changes the logit difference as the same change made with plain torch hooks on the model's own
modules does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import token_id
from attention_atlas.model.inspect.circuit import find_circuit
from attention_atlas.model.inspect.norm_output import norm_module
from tests.circuit_models import redraw
from tests.tiny_hf import build_type

TYPES = ("mistral", "qwen3", "gemma", "phi3", "olmo", "mixtral", "olmoe", "qwen2_moe", "starcoder2", "smollm3",
         "gpt_neo", "bloom", "mpt")
TEXTS = ("the cat sat on the mat", "the cat sat on the dog", "fox", "lazy")  # the last token differs: sliding
# windows of 3 tokens hide an earlier difference from the last one
pytestmark = pytest.mark.slow  # thirteen models built and run: about 10 s


def _first(value):
    return value if isinstance(value, torch.Tensor) else value[0]


def _logit_difference(runner, ids: list[int], hooks: list[torch.utils.hooks.RemovableHandle]) -> float:
    """The model's own logit difference after the last token, plain torch hooks removed after."""
    try:
        with torch.no_grad():
            logits = runner.model(input_ids=torch.tensor([ids])).logits[0, -1]
    finally:
        for hook in hooks:
            hook.remove()
    answer, wrong = (token_id(runner, word, "answer") for word in TEXTS[2:])
    return float(logits[answer] - logits[wrong])


def _recorded(runner, module: torch.nn.Module, ids: list[int], before: bool) -> torch.Tensor:
    """The module's first input (`before`) or its output in a plain run of `ids`."""
    seen: list[torch.Tensor] = []
    if before:
        hook = module.register_forward_pre_hook(
            lambda _, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    else:
        hook = module.register_forward_hook(lambda _, __, out: seen.append(_first(out)))
    _logit_difference(runner, ids, [hook])
    return seen[0].detach().clone()


def _adding(module: torch.nn.Module, extra: torch.Tensor, before: bool) -> torch.utils.hooks.RemovableHandle:
    """A plain hook adding `extra` to the module's first input (`before`) or to its output."""
    if before:
        def pre(_, args, kwargs):
            if args:
                return (args[0] + extra, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + extra}

        return module.register_forward_pre_hook(pre, with_kwargs=True)
    change: Callable = lambda out: out + extra  # noqa: E731
    return module.register_forward_hook(
        lambda _, __, out: change(out) if isinstance(out, torch.Tensor) else (change(out[0]), *out[1:]))


@pytest.mark.parametrize("model_type", TYPES)
def test_a_pre_norm_decoder_is_its_graph(model_type, tmp_path) -> None:
    runner = load_hf_runner(str(redraw(build_type(model_type, tmp_path / model_type))))
    circuit = find_circuit(runner, *TEXTS, "EAP")  # proves the graph on its two runs, or refuses
    clean, corrupted = (runner.text.encode(text) for text in TEXTS[:2])
    assert circuit.clean == pytest.approx(_logit_difference(runner, clean, []), abs=1e-4)
    last = runner.facts.n_decoder_layers - 1
    mlp = runner.taps[f"decoder.{last}.hook_mlp_out"].module
    block = runner.taps[f"decoder.{last}.hook_resid_post"].module
    change = _recorded(runner, mlp, corrupted, False) - _recorded(runner, mlp, clean, False)
    by_hooks = _logit_difference(runner, clean, [_adding(block, change, before=False)])
    edges = list(circuit.scores)
    assert circuit.evaluate([e for e in edges if e != f"m{last}->logits"]) == pytest.approx(by_hooks, abs=1e-4)
    first, ln2 = runner.taps["decoder.0.hook_resid_pre"].module, norm_module(runner, "decoder.0.ln2.hook_normalized")
    change = _recorded(runner, first, corrupted, True) - _recorded(runner, first, clean, True)
    by_hooks = _logit_difference(runner, clean, [_adding(ln2, change, before=True)])
    assert circuit.evaluate([e for e in edges if e != "input->m0"]) == pytest.approx(by_hooks, abs=1e-4)
    assert abs(by_hooks - circuit.clean) > 1e-4  # the edge matters: the comparison is no identity
