"""A summarised capture reports its progress a block of query rows at a time (model/core/capture/record.py
`reporting_progress`): the layers passed, with the share of the layer under way's rows, never past the layers kept and
never going back, each layer's end a whole number; what `report` raises stops the run there."""

from __future__ import annotations

import pytest

from attention_atlas.model.core.attention import source
from attention_atlas.model.core.capture.record import reporting_progress
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from tests import tiny_hf

TEXT = "the quick brown fox jumps over the lazy dog " * 6  # 55 tokens with <s>: blocks of 16 rows, 4 a layer


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load_hf_runner(str(tiny_hf.build("llama", tmp_path_factory.mktemp("progress") / "llama")))


def test_a_summarised_run_reports_each_block_of_rows(llama, monkeypatch) -> None:
    monkeypatch.setattr(source, "ROW_BLOCK", 16)  # the torch ops' blocks (and the kernel's, capped by their count)
    reports: list[tuple[float, int]] = []
    with reporting_progress(lambda passed, layers: reports.append((passed, layers))):
        trace = llama.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    layers = trace.n_layers("decoder.attn")
    passed = [p for p, _ in reports]
    assert {n for _, n in reports} == {layers} and passed == sorted(passed) and passed[-1] == layers
    assert all(0 < p <= layers for p in passed)
    assert len(passed) > 2 * layers and any(p != int(p) for p in passed)  # within a layer, a share of its rows
    assert all(float(layer) in passed for layer in range(1, layers + 1))  # each layer's end
    assert passed[0] == pytest.approx(16 / 55)  # the first block: 16 of the first layer's 55 rows


def test_what_report_raises_stops_a_summarised_run_within_a_layer(llama, monkeypatch) -> None:
    monkeypatch.setattr(source, "ROW_BLOCK", 16)

    def report(passed: float, layers: int) -> None:
        if passed > 0.5:
            raise KeyboardInterrupt  # as the app's RunAbandoned: the run ends there

    with reporting_progress(report), pytest.raises(KeyboardInterrupt):
        llama.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
