"""Activation patching beyond the causal LMs TransformerLens covers: the toys (a from-scratch GPT reading its own
output, the encoder-decoder) and Hugging Face encoder-decoders (T5, BART). Each kind is checked against the same patch
made with plain torch hooks on the model's own modules, and attribution patching against the gradient those hooks
give (a zero added to the value, whose gradient is the value's)."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import attention_atlas as aa
from attention_atlas import attribute_command
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import token_id
from attention_atlas.model.inspect.patching import attribution_patching, kinds_of, patch
from tests.tiny_hf import build

DATES = ("march 3 2021", "march 4 2021", "3", "4")  # clean, corrupted, answer, wrong
HF_TEXTS = ("the quick brown fox", "the quick brown dog", "cat", "dog")
HF_TARGET = "the cat sat"
Replace = Callable[[torch.Tensor], torch.Tensor]  # a value (1, ..., width) -> the value to use instead


def _logit_difference(forward: Callable[[], torch.Tensor], position: int, ids: tuple[int, int]) -> torch.Tensor:
    out = forward()[0, position]  # (vocab,): logits or log-probabilities, whose differences agree
    return out[ids[0]] - out[ids[1]]


def _patched(module: nn.Module, replace: Replace, before: bool) -> torch.utils.hooks.RemovableHandle:
    """A plain torch hook replacing the module's first input (`before`), or its output (the first of a tuple)."""
    if before:
        def pre(_: nn.Module, args: tuple, kwargs: dict) -> tuple:
            if args:
                return (replace(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": replace(kwargs["hidden_states"])}

        return module.register_forward_pre_hook(pre, with_kwargs=True)

    def after(_: nn.Module, __: tuple, out: torch.Tensor | tuple) -> torch.Tensor | tuple:
        return replace(out) if isinstance(out, torch.Tensor) else (replace(out[0]), *out[1:])

    return module.register_forward_hook(after)


def _recorded(modules: dict[str, tuple[nn.Module, bool]],
              forward: Callable[[], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each module's value (its first input, or its output) in one run."""
    seen: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> Replace:
        def keep(value: torch.Tensor) -> torch.Tensor:
            seen[name] = value.detach().clone()
            return value

        return keep

    handles = [_patched(module, keeper(name), before) for name, (module, before) in modules.items()]
    with torch.no_grad():
        forward()
    for handle in handles:
        handle.remove()
    return seen


def _head(value: torch.Tensor, heads: int, head: int) -> tuple:
    """Where one head's output is in a value: (batch, heads, pos, d_head), or (batch, pos, heads x d_head)."""
    if value.ndim == 4:
        return (slice(None), head)
    width = value.shape[-1] // heads
    return (Ellipsis, slice(head * width, (head + 1) * width))


def _taking(source: torch.Tensor, heads: int, cell: int, head: bool) -> Replace:
    """A value with one position (or one head, `head`) taken from `source`."""
    def replace(value: torch.Tensor) -> torch.Tensor:
        value = value.clone()
        where = _head(value, heads, cell) if head else (slice(None), cell)
        value[where] = source[where]
        return value

    return replace


def _reference(modules: dict[str, tuple[nn.Module, bool]], heads: int, clean: Callable[[], torch.Tensor],
               corrupted: Callable[[], torch.Tensor], position: int, ids: tuple[int, int]
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """By kind, each patched run's logit difference, and the first-order estimate from the gradient in the corrupted
    run. `modules`: kind -> (the module whose value is patched, whether it is its input), per layer as "kind.layer";
    head kinds' values are the heads' outputs concatenated (width heads x d_head)."""
    clean_values = _recorded(modules, clean)
    corrupted_values = _recorded(modules, corrupted)
    exact: dict[str, list[list[float]]] = {}
    for name, (module, before) in modules.items():
        kind = name.rsplit(".", 1)[0]
        source = clean_values[name]
        cells = heads if kind.endswith("head_out") else source.shape[1]
        row = []
        for cell in range(cells):
            handle = _patched(module, _taking(source, heads, cell, kind.endswith("head_out")), before)
            with torch.no_grad():
                row.append(float(_logit_difference(corrupted, position, ids)))
            handle.remove()
        exact.setdefault(kind, []).append(row)
    zeros = {name: torch.zeros_like(value, requires_grad=True) for name, value in corrupted_values.items()}
    handles = [_patched(module, lambda value, name=name: value + zeros[name], before)
               for name, (module, before) in modules.items()]
    with torch.enable_grad():
        grads = dict(zip(zeros, torch.autograd.grad(_logit_difference(corrupted, position, ids), list(zeros.values())),
                         strict=True))
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        base = float(_logit_difference(corrupted, position, ids))
    estimated: dict[str, list[np.ndarray]] = {}
    for name in modules:
        kind = name.rsplit(".", 1)[0]
        change = ((clean_values[name] - corrupted_values[name]) * grads[name])[0].double()  # (pos, width) or
        # (heads, pos, d_head)
        if not kind.endswith("head_out"):
            summed = change.sum(dim=-1)  # (pos,)
        elif change.ndim == 3:
            summed = change.sum(dim=(1, 2))  # (heads,)
        else:
            summed = change.reshape(change.shape[0], heads, -1).sum(dim=(0, 2))
        estimated.setdefault(kind, []).append(base + summed.numpy())
    return ({kind: np.array(rows) for kind, rows in exact.items()},
            {kind: np.stack(rows) for kind, rows in estimated.items()})


def _compare(runner: object, texts: tuple[str, str, str, str], modules: dict, forwards: tuple, position: int,
             target: str | None = None) -> None:
    clean, corrupted, answer, wrong = texts
    found = patch(runner, clean, corrupted, answer, wrong, target=target, tokens_per_pass=40)
    estimated = attribution_patching(runner, clean, corrupted, answer, wrong, target=target)
    ids = (token_id(runner, answer, "answer"), token_id(runner, wrong, "wrong answer"))
    exact, estimate = _reference(modules, runner.facts.n_heads, *forwards, position, ids)
    assert set(found.results) == set(kinds_of(runner)) == set(exact)
    assert found.complete and abs(found.clean - found.corrupted) > 1e-3
    for kind in exact:
        np.testing.assert_allclose(found.results[kind], exact[kind], atol=5e-5, err_msg=kind)
        np.testing.assert_allclose(estimated.results[kind], estimate[kind], atol=5e-5, err_msg=kind)
    assert found.normalised("resid_pre")[0].round(4).tolist().count(1.0) == 1  # the one token that differs, at the
    # stack's input, brings the clean run back; every other position is the corrupted run's


@pytest.mark.parametrize("model_id", ["toy-gpt-date", "toy-date"])
def test_a_toy_is_patched_as_torch_hooks_on_its_hook_points_patch_it(model_id: str) -> None:
    """The from-scratch GPT reads its own output (both runs the clean one's), the encoder-decoder its sources."""
    runner = aa.load(model_id)._runner
    model, points = runner.toy.model, runner.toy.model.hook_points
    clean = runner.run(DATES[0])
    traces = [runner.run(text, clean.output_text) for text in DATES[:2]]
    stacks = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
              "head_out": "attn.hook_z"}
    stack = "encoder" if runner.facts.kind == "encoder-decoder" else "decoder"
    layers = runner.facts.n_encoder_layers if stack == "encoder" else runner.facts.n_decoder_layers
    modules = {f"{kind}.{layer}": (points[f"{stack}.{layer}.{hook}"], False) for kind, hook in stacks.items()
               for layer in range(layers)}
    if stack == "encoder":
        modules |= {f"cross_head_out.{layer}": (points[f"decoder.{layer}.cross_attn.hook_z"], False)
                    for layer in range(runner.facts.n_decoder_layers)}

    def forward(trace: aa.Trace) -> Callable[[], torch.Tensor]:
        masks = {site: torch.as_tensor(np.array(mask))[None, None] for site, mask in trace.masks.items()}
        source = torch.tensor([trace.ids])
        if stack == "decoder":
            return lambda: model(source, masks["decoder.attn"])
        target = torch.tensor([trace.target_ids])
        return lambda: model(source, target, masks["encoder.attn"], masks["decoder.attn"], masks["decoder.cross_attn"])

    sequence = len(clean.target_ids) if stack == "encoder" else len(clean.ids)
    _compare(runner, DATES, modules, tuple(forward(trace) for trace in traces), sequence - 1)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_an_encoder_decoder_is_patched_as_torch_hooks_on_its_modules_patch_it(tmp_path, family: str) -> None:
    """The four kinds in the encoder (which reads the two texts), cross_head_out in the decoder; both runs read the
    target given."""
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    model = runner.model
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(0)
        for parameter in model.parameters():  # weights larger than the initial ones (std 0.02), whose effects on a
            if parameter.ndim == 2:  # tiny BART all but vanish
                parameter.normal_(0, 0.2)
    if family == "t5":
        encoder, decoder = model.encoder.block, model.decoder.block
        parts = {"attn_out": lambda layer: (encoder[layer].layer[0].SelfAttention, False),
                 "mlp_out": lambda layer: (encoder[layer].layer[1].DenseReluDense, False),
                 "head_out": lambda layer: (encoder[layer].layer[0].SelfAttention.o, True)}
        cross = [(block.layer[1].EncDecAttention.o, True)
                 for block in decoder]  # pyright: ignore[reportGeneralTypeIssues] torch's __getattr__
    else:
        encoder, decoder = model.model.encoder.layers, model.model.decoder.layers
        parts = {"attn_out": lambda layer: (encoder[layer].self_attn, False),
                 "mlp_out": lambda layer: (encoder[layer].fc2, False),
                 "head_out": lambda layer: (encoder[layer].self_attn.out_proj, True)}
        cross = [(layer.encoder_attn.out_proj, True)
                 for layer in decoder]  # pyright: ignore[reportGeneralTypeIssues] torch's __getattr__
    modules = {f"resid_pre.{layer}": (encoder[layer], True) for layer in range(len(encoder))}
    modules |= {f"{kind}.{layer}": part(layer) for kind, part in parts.items() for layer in range(len(encoder))}
    modules |= {f"cross_head_out.{layer}": module for layer, module in enumerate(cross)}
    traces = [runner.run(text, HF_TARGET) for text in HF_TEXTS[:2]]

    def forward(trace: aa.Trace) -> Callable[[], torch.Tensor]:
        return lambda: model(input_ids=torch.tensor([trace.ids]), decoder_input_ids=torch.tensor([trace.target_ids]),
                             use_cache=False).logits

    _compare(runner, HF_TEXTS, modules, tuple(forward(trace) for trace in traces), len(traces[0].target_ids) - 1,
             target=HF_TARGET)


def test_a_position_the_runs_do_not_read_gets_a_sentence(tmp_path) -> None:
    runner = aa.load("toy-gpt-date")._runner
    with pytest.raises(UserError, match=r"after token 13 to 23 of this model's runs, not after token 3\."):
        patch(runner, *DATES, position=3)  # inside the prompt: the toy's runs read its output
    found = patch(runner, *DATES, position=-2, kinds=("resid_pre",))  # the day's last digit: after "2021-03-0"
    assert found.position == 22 and found.output == "2021-03-03" and found.clean_tokens[22] == "0"
    assert found.clean > 0 > found.corrupted  # each text's own day is the likelier
    causal = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    with pytest.raises(UserError, match=r"after token 3 of this model's runs, not after token 1: end the text"):
        patch(causal, *HF_TEXTS[:2], " fox", " dog", position=1)


def test_the_api_and_the_command_line_patch_a_toy(tmp_path, capsys) -> None:
    model = aa.load("toy-date")
    found = model.patch(*DATES[:2], answer="3", wrong="4", position=-2, kinds=["resid_pre", "cross_head_out"])
    assert list(found.results) == ["resid_pre", "cross_head_out"] and found.results["cross_head_out"].shape == (2, 4)
    out = tmp_path / "patched.json"
    assert attribute_command.main(["--model", "toy-date", "--text", DATES[0], "--answer", "3", "--wrong", "4",
                                   "--position", "-2", "--corrupted", DATES[1], "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)["patching"]
    assert summary["clean"] == pytest.approx(found.clean) and summary["corrupted"] == pytest.approx(found.corrupted)
    written = json.loads(out.read_text())["patching"]
    np.testing.assert_allclose(written["normalised"]["cross_head_out"], found.normalised("cross_head_out"), atol=1e-9)
    layer, head = np.unravel_index(found.normalised("cross_head_out").argmax(), (2, 4))
    assert summary["most_restored"]["cross_head_out"] == {"layer": layer, "head": head, "restored": pytest.approx(
        found.normalised("cross_head_out").max())}
    assert attribute_command.main(["--model", "toy-date", "--text", DATES[0], "--answer", "3",
                                   "--corrupted", DATES[1]]) == 2
    assert "give --wrong as well" in capsys.readouterr().err
