"""`attention-atlas circuit`: every edge's score and the faithfulness curve as JSON — the scores the EAP-IG library
itself gave on the same tiny GPT-2 (tests/data/eap_ig_reference.json), the curve from the corrupted run (0) to the
clean one (1) — and a sentence, exit 2, for input the circuit refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attention_atlas import circuit_command
from tests.circuit_models import ANSWER, CLEAN, CORRUPTED, WRONG, build_circuit_model

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "eap_ig_reference.json").read_text())


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_circuit_model("gpt2", tmp_path_factory.mktemp("gpt2"))


def test_the_command_writes_every_score_and_the_curve(folder, tmp_path, capsys) -> None:
    out = tmp_path / "circuit.json"
    code = circuit_command.main(["--model", str(folder), "--clean", CLEAN, "--corrupted", CORRUPTED, "--answer",
                                 ANSWER, "--wrong", WRONG, "--out", str(out)])
    assert code == 0
    written, printed = json.loads(out.read_text()), json.loads(capsys.readouterr().out)
    theirs = REFERENCE["models"]["gpt2"]["scores"]["EAP-IG"]
    assert list(written["scores"]) == list(theirs) and written["method"] == "EAP-IG" and written["steps"] == 5
    expected = np.array(list(theirs.values()))
    np.testing.assert_allclose(list(written["scores"].values()), expected, rtol=1e-3,
                               atol=1e-5 * np.abs(expected).max())
    curve = written["curve"]
    assert curve["edges"][0] == 0 and curve["edges"][-1] == 262 and curve["edges"] == sorted(set(curve["edges"]))
    assert curve["faithfulness"][0] == 0.0 and curve["faithfulness"][-1] == 1.0
    ranked = sorted(written["scores"].items(), key=lambda item: -abs(item[1]))[:circuit_command.TOP]
    assert [(e["edge"], e["score"]) for e in printed["top_edges"]] == ranked
    assert printed["clean"] == written["clean"] == pytest.approx(REFERENCE["models"]["gpt2"]["clean"], rel=1e-3)
    assert list(printed["faithfulness"].values()) == curve["faithfulness"]


def test_the_command_says_what_is_wrong(folder, capsys) -> None:
    code = circuit_command.main(["--model", str(folder), "--clean", CLEAN, "--corrupted", "the fox sat", "--answer",
                                 ANSWER, "--wrong", WRONG, "--method", "EAP"])
    assert code == 2
    assert "error: The clean and the corrupted text must have as many tokens" in capsys.readouterr().err
