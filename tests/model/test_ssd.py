"""A Mamba-2 layer's implicit attention (model/hf/ssd.py) on the tiny Granite 4 hybrid and Nemotron-H: the matrix is
causal, made again into the layer's output it equals the model's own, equals a step-by-step recurrence of the scan
written here, and a matrix that does not hold is refused; models without Mamba-2 layers name none."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf import ssd
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hybrids import build_hybrid, build_lively_mamba2

pytestmark = pytest.mark.slow  # three tiny hybrids built and opened
TEXT = "the quick brown fox jumps over the lazy dog the quick brown fox"


@pytest.fixture(scope="module")
def runners(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ssd")
    built = {t: build_lively_mamba2(t, root / t) for t in ("granitemoehybrid", "nemotron_h")}
    built["jamba"] = build_hybrid("jamba", root / "jamba")  # Mamba (v1): no Mamba-2 layer
    return {t: load_hf_runner(str(folder)) for t, folder in built.items()}


def recurrence(mixer: torch.nn.Module, x_in: torch.Tensor) -> torch.Tensor:
    """The scan as a recurrence, state h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = h_t C_t + D x_t, written from
    Dao & Gu's definition (not the matrix): (n, heads, d_head) float64."""
    n, heads, p, groups, states = len(x_in), mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size
    w = {k: v.detach().double() for k, v in mixer.named_parameters()}
    projected = F.linear(x_in, w["in_proj.weight"], w.get("in_proj.bias"))
    _, xbc, dt = projected.split([mixer.intermediate_size, mixer.conv_dim, heads], dim=-1)
    kernel = w["conv1d.weight"].shape[-1]
    padded = F.pad(xbc.T, (kernel - 1, 0))  # causal: each position sees itself and the kernel - 1 before it
    conv = torch.stack([(padded[:, t:t + kernel] * w["conv1d.weight"][:, 0]).sum(-1) for t in range(n)])
    conv = mixer.act(conv + w.get("conv1d.bias", 0.0))
    xs, b, c = conv.split([mixer.intermediate_size, groups * states, groups * states], dim=-1)
    low, high = mixer.time_step_limit  # pyright: ignore[reportGeneralTypeIssues] torch's __getattr__
    dt = F.softplus(dt + w["dt_bias"]).clamp(low, high)
    a = -torch.exp(w["A_log"])
    xs = xs.view(n, heads, p)
    state = torch.zeros(heads, p, states, dtype=torch.float64)
    out = []
    for t in range(n):
        bt = b[t].view(groups, states).repeat_interleave(heads // groups, 0)  # (heads, states)
        ct = c[t].view(groups, states).repeat_interleave(heads // groups, 0)
        state = torch.exp(dt[t] * a)[:, None, None] * state + dt[t][:, None, None] * xs[t][:, :, None] * bt[:, None]
        out.append(torch.einsum("hpn,hn->hp", state, ct) + w["D"][:, None] * xs[t])
    return torch.stack(out)


@pytest.mark.parametrize("model_type", ["granitemoehybrid", "nemotron_h"])
def test_the_matrix_is_the_scan_and_holds_to_the_models_output(runners, model_type: str, monkeypatch) -> None:
    runner = runners[model_type]
    ids = runner.text.encode(TEXT)
    mixers = ssd.ssd_mixers(runner.model)
    assert list(mixers) == ([0, 2] if model_type == "granitemoehybrid" else [0])
    found = ssd.implicit_attention(runner.model, ids, 0)
    assert found.difference < 1e-4
    assert np.all(np.triu(found.matrix, 1) == 0) and np.abs(np.tril(found.matrix)).max() > 0
    inputs = {}
    handle = mixers[0].register_forward_hook(lambda m, args, kwargs, out: inputs.update(
        x=(args[0] if args else kwargs["hidden_states"])[0].double()), with_kwargs=True)
    with torch.inference_mode():
        runner.model(input_ids=torch.tensor([ids]), use_cache=False)
    handle.remove()
    scanned = recurrence(mixers[0], inputs["x"])  # (n, heads, d_head)
    _, xs, _ = ssd._matrix(mixers[0], inputs["x"])
    from_matrix = np.einsum("hts,shp->thp", found.matrix.astype(np.float64), xs.numpy()) + \
        found.skip[None, :, None] * xs.numpy()
    np.testing.assert_allclose(from_matrix, scanned.numpy(), rtol=1e-4, atol=1e-9)


def test_a_matrix_that_does_not_hold_is_refused(runners, monkeypatch) -> None:
    runner = runners["granitemoehybrid"]
    made = ssd._matrix
    monkeypatch.setattr(ssd, "_matrix", lambda mixer, x: (made(mixer, x)[0] * 1.5, *made(mixer, x)[1:]))
    with pytest.raises(UserError, match="the matrix is not drawn"):
        ssd.implicit_attention(runner.model, runner.text.encode(TEXT), 0)


def test_models_without_a_mamba_2_layer_have_none(runners) -> None:
    runner = runners["jamba"]  # Mamba (v1): a decay per channel and state, no head's single matrix
    assert ssd.ssd_mixers(runner.model) == {}
    with pytest.raises(UserError, match="no Mamba-2 layer"):
        ssd.implicit_attention(runner.model, runner.text.encode(TEXT), 0)
