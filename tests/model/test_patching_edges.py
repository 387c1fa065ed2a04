"""Patching's edges: a text patched into itself is refused in a sentence (it divided by zero: Infinity and NaN in
the command's JSON, "All-NaN slice" from `most_restored`), the command's JSON is strict, a kind not patched is left
out of the summary, and the patched runs and the head scan take the server's run slot one batch at a time (they held
it for the whole loop, minutes, while other sessions' runs waited)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from attention_atlas import attribute_command
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.inspect.ablation import every_head, scan_heads
from attention_atlas.model.inspect.patching import patch, patching_steps, prepare_patching
from attention_atlas.model.registry import load_runner

TEXT, CORRUPTED = "march 3 2021", "march 4 2021"  # toy-gpt-date reads its output "2021-03-03": after its "0" the
ASKED = ["--answer", "3", "--wrong", "4", "--position", "-2"]  # day's last digit, "3" against "4" (+6.5 and -6.4)


def no_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON")


class CountingSlot:
    """A run slot that counts how often it is taken and knows whether it is held."""

    def __init__(self) -> None:
        self.taken, self.held = 0, False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        assert not self.held, "the slot is taken twice at once"
        self.taken, self.held = self.taken + 1, True
        try:
            yield
        finally:
            self.held = False


class Watched:
    """A runner whose batched runs count themselves and fail unless the slot is held."""

    def __init__(self, runner, slot: CountingSlot) -> None:
        self.runner, self.slot, self.batches = runner, slot, 0

    def __getattr__(self, name: str):
        return getattr(self.runner, name)

    def _counted(self) -> None:
        assert self.slot.held, "a batch computed outside the run slot"
        self.batches += 1

    def patched_outcomes(self, *args):
        self._counted()
        return self.runner.patched_outcomes(*args)

    def ablation_outcomes(self, *args):
        self._counted()
        return self.runner.ablation_outcomes(*args)


def test_a_text_patched_into_itself_is_refused_in_a_sentence(capsys) -> None:
    runner = load_runner("toy-gpt-date")
    with pytest.raises(UserError, match=r"give the same logit difference '3' − '4' \(.*\): patching has nothing to "
                                        "restore"):
        patch(runner, TEXT, TEXT, "3", "4", ("resid_pre",), position=-2)
    code = attribute_command.main(["--model", "toy-gpt-date", "--text", TEXT, *ASKED, "--corrupted", TEXT])
    out = capsys.readouterr()
    assert code == 2 and "patching has nothing to restore" in out.err and out.out == ""


def test_a_kind_not_patched_is_left_out_and_the_json_is_strict(tmp_path, capsys) -> None:
    """A stopped patching's cells not reached are null in the JSON, and a kind with none patched has no 'most
    restored' cell (it raised "All-NaN slice")."""
    runner = load_runner("toy-gpt-date")
    found = patch(runner, TEXT, CORRUPTED, "3", "4", ("resid_pre", "head_out"), position=-2)
    assert found.clean > 1 and found.corrupted < -1
    stopped = replace(found, results={**found.results, "head_out": np.full_like(found.results["head_out"], np.nan)})
    restored = attribute_command.most_restored(stopped)
    assert set(restored) == {"resid_pre"}
    assert restored["resid_pre"]["restored"] == pytest.approx(float(np.nanmax(found.normalised("resid_pre"))))
    text = json.dumps(stopped.as_dict(), allow_nan=False)
    assert json.loads(text)["normalised"]["head_out"][0][0] is None
    out = tmp_path / "patched.json"
    assert attribute_command.main(["--model", "toy-gpt-date", "--text", TEXT, *ASKED, "--corrupted", CORRUPTED,
                                   "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out, parse_constant=no_constant)
    assert set(summary["patching"]["most_restored"]) == {"resid_pre", "attn_out", "mlp_out", "head_out"}
    assert json.loads(out.read_text(), parse_constant=no_constant)["patching"]["clean"] == pytest.approx(found.clean,
                                                                                                         abs=1e-5)


def test_the_patched_runs_take_the_run_slot_a_batch_at_a_time() -> None:
    runner = load_runner("toy-gpt-date")
    runs = prepare_patching(runner, TEXT, CORRUPTED, "3", "4", ("resid_pre", "head_out"), position=-2)
    slot = CountingSlot()
    watched = Watched(runner, slot)
    steps = [(done, total, slot.held) for done, total, _ in patching_steps(watched, runs, slot=slot,
                                                                          tokens_per_pass=3 * runs.tokens_per_run)]
    cells = len(runs.cells())
    assert slot.taken == watched.batches == math.ceil(cells / 3) == len(steps) - 1 > 1
    assert steps[-1][:2] == (cells, cells) and not any(held for _, _, held in steps)  # let go while the caller draws


def test_the_head_scan_takes_the_run_slot_a_batch_at_a_time() -> None:
    runner = load_runner("toy-gpt-date")
    trace = runner.run(TEXT)
    slot = CountingSlot()
    watched = Watched(runner, slot)
    progress: list[int] = []
    tokens = len(trace.ids) + len(trace.target_ids)
    scan = scan_heads(watched, trace, "zero", lambda done, total: progress.append(slot.held), tokens_per_pass=
                      5 * tokens, slot=slot)
    heads = len(every_head(trace))
    assert slot.taken == watched.batches == math.ceil(heads / 5) == len(progress) > 1
    assert not any(progress)  # the progress is drawn with the slot let go
    assert scan.effects["decoder.attn"].shape == (runner.facts.n_decoder_layers, runner.facts.n_heads)
