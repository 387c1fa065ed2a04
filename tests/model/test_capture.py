"""Capture returns what the hooks saw, leaves the model as it was, and is safe across threads."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from attention_atlas.model.core.capture.hooks import ModuleTap, active_recorder
from attention_atlas.model.core.capture.record import capture, reporting_progress, select_hook_names
from attention_atlas.model.core.masks import causal_mask, combine, padding_mask
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.transformer import build_model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1)
    return build_model(TransformerConfig.toy(vocab_size=16)).eval()


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src_len, tgt_len = 3 + seed % 7, 2 + seed % 5
    return torch.randint(3, 16, (1, src_len), generator=g), torch.randint(3, 16, (1, tgt_len), generator=g)


def _forward(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    src_mask = padding_mask(src, 0)
    return model(src, tgt, src_mask, combine(padding_mask(tgt, 0), causal_mask(tgt.size(1))), src_mask)


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_capture_does_not_change_outputs(model) -> None:
    src, tgt = _batch(3)
    with torch.inference_mode():
        plain = _forward(model, src, tgt)
    captured_out, captured = capture(model, model.hook_points, None, lambda: _forward(model, src, tgt))
    assert torch.equal(plain, captured_out)
    assert set(captured) == set(model.hook_points)
    assert _hook_count(model) == 0
    assert active_recorder() is None


def test_captured_values_are_consistent(model) -> None:
    src, tgt = _batch(5)
    _, c = capture(model, model.hook_points, None, lambda: _forward(model, src, tgt))
    heads, src_len, tgt_len = model.cfg.n_heads, src.size(1), tgt.size(1)
    assert c["encoder.0.attn.hook_pattern"].shape == (1, heads, src_len, src_len)
    assert c["decoder.1.cross_attn.hook_pattern"].shape == (1, heads, tgt_len, src_len)
    np.testing.assert_array_equal(c["encoder.0.hook_normalized_resid_post"], c["encoder.1.hook_resid_pre"])
    scores = torch.from_numpy(c["decoder.0.attn.hook_attn_scores"])
    expected = scores.masked_fill(~causal_mask(tgt_len), float("-inf")).softmax(-1).numpy()
    np.testing.assert_allclose(c["decoder.0.attn.hook_pattern"], expected, atol=1e-6)
    assert np.triu(c["decoder.0.attn.hook_pattern"][0, 0], k=1).max() == 0.0


def test_selection_keeps_only_the_named_hooks(model) -> None:
    src, tgt = _batch(1)
    _, c = capture(model, model.hook_points, "*.hook_pattern", lambda: _forward(model, src, tgt))
    assert sorted(c) == sorted(n for n in model.hook_points if n.endswith("hook_pattern"))
    assert len(c) == 2 + 2 * 2
    assert select_hook_names(["a.x", "b.y"], lambda n: n.startswith("b")) == ["b.y"]
    assert select_hook_names(["a.x", "b.y"], ["a.x"]) == ["a.x"]


def test_hooks_are_removed_when_the_run_fails(model) -> None:
    def failing() -> None:
        _forward(model, *_batch(2))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        capture(model, _module_sites(model), None, failing)
    assert _hook_count(model) == 0
    assert active_recorder() is None


def test_eight_threads_on_one_model_equal_serial_runs(model) -> None:
    batches = [_batch(seed) for seed in range(8)]

    def run(batch):
        return capture(model, model.hook_points, None, lambda: _forward(model, *batch))[1]

    serial = [run(b) for b in batches]
    for _ in range(3):
        with ThreadPoolExecutor(max_workers=8) as pool:
            parallel = list(pool.map(run, batches))
        for expected, got in zip(serial, parallel, strict=True):
            assert expected.keys() == got.keys()
            for name in expected:
                np.testing.assert_array_equal(expected[name], got[name])
    assert _hook_count(model) == 0


def _module_sites(model) -> dict:
    """Plain modules (as a Hugging Face adapter uses), captured with PyTorch forward hooks."""
    layer = model.encoder.layers[0]
    return {
        "layer0_out": layer,
        "layer0_attn_in": ModuleTap(layer.attn, lambda args, kwargs, out: args[0]),
        "encoder.0.hook_normalized_resid_post": model.hook_points["encoder.0.hook_normalized_resid_post"],
    }


def test_forward_hook_sites_read_outputs_and_inputs(model) -> None:
    src, tgt = _batch(6)
    _, c = capture(model, _module_sites(model), None, lambda: _forward(model, src, tgt))
    np.testing.assert_array_equal(c["layer0_out"], c["encoder.0.hook_normalized_resid_post"])  # post-norm output
    _, points = capture(model, model.hook_points, "encoder.0.hook_resid_pre", lambda: _forward(model, src, tgt))
    np.testing.assert_array_equal(c["layer0_attn_in"], points["encoder.0.hook_resid_pre"])
    assert _hook_count(model) == 0


@pytest.mark.parametrize("kind", ["hook points", "forward hooks"])
def test_uncaptured_forward_in_another_thread_does_not_leak(model, kind: str) -> None:
    """A plain forward pass running meanwhile (no lock) must not write into the capture."""
    sites = model.hook_points if kind == "hook points" else _module_sites(model)
    mine, other = _batch(4), (torch.randint(3, 16, (1, 11)), torch.randint(3, 16, (1, 9)))
    expected = capture(model, sites, None, lambda: _forward(model, *mine))[1]
    stop = threading.Event()

    def busy() -> None:
        with torch.inference_mode():
            while not stop.is_set():
                _forward(model, *other)

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        for _ in range(20):
            got = capture(model, sites, None, lambda: _forward(model, *mine))[1]
            for name in expected:
                np.testing.assert_array_equal(expected[name], got[name])
    finally:
        stop.set()
        worker.join()


def test_a_capture_reports_each_kept_attention_layer_to_its_own_thread_only(model) -> None:
    """reporting_progress: (layers passed, layers kept) as the forward pass reaches each `hook_pattern` kept, on
    the thread that asked, not on a capture running meanwhile in another; what `report` raises stops the run."""
    patterns = [name for name in model.hook_points if name.endswith("hook_pattern")]
    reports: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []
    with reporting_progress(lambda passed, layers: reports.append((passed, layers))):
        with ThreadPoolExecutor(1) as pool:
            pool.submit(capture, model, model.hook_points, None, lambda: _forward(model, *_batch(1))).result()
        capture(model, model.hook_points, None, lambda: _forward(model, *_batch(2)))
    with reporting_progress(lambda passed, layers: other.append((passed, layers))):
        capture(model, model.hook_points, "*.hook_resid_post", lambda: _forward(model, *_batch(3)))
    assert len(patterns) > 2
    assert reports == [(passed, len(patterns)) for passed in range(1, len(patterns) + 1)]
    assert other == []  # no pattern kept, nothing to report
    stop = reporting_progress(lambda passed, layers: pytest.fail("stopped") if passed == 2 else None)
    with stop, pytest.raises(pytest.fail.Exception):  # a BaseException, as Streamlit's stop of a script
        capture(model, model.hook_points, None, lambda: _forward(model, *_batch(4)))
    assert _hook_count(model) == 0 and active_recorder() is None
