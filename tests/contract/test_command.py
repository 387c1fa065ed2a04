"""The `attention-atlas` command: --help names its commands, `--trace FILE` is checked before any server starts and
reaches the app as an absolute path, and serving is the only path that imports Streamlit. No server is started here:
`start_server` is replaced by a recorder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_atlas import cli
from attention_atlas.model.registry import load_runner


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """The servers `cli.main` would have started: (streamlit's command line, the environment it sets)."""
    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(cli, "start_server", lambda command, environment: calls.append((command, environment)))
    return calls


def test_help_names_the_commands(capsys, started) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attention-atlas ")
    for shown in ("attention-atlas trace --model", "attention-atlas train --task", "--trace FILE", "--model MODEL"):
        assert shown in out, shown
    assert not started


@pytest.mark.parametrize("command", ["trace", "train"])
def test_each_command_has_its_own_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main([command, "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: attention-atlas {command} ")
    assert ("--text" in out) == (command == "trace") and ("--task" in out) == (command == "train")


def _not_a_trace(folder: Path, kind: str) -> Path:
    """A path that is no trace file, of the kind named."""
    path = folder / f"{kind}.npz"
    if kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("not a numpy archive")
    elif kind == "other arrays":
        np.savez(path, weights=np.zeros(3))
    return path  # "missing": nothing there


@pytest.mark.parametrize(("kind", "said"), [
    ("missing", "missing.npz does not exist."),
    ("directory", "directory.npz is not a file."),
    ("text", "text.npz is not a trace file"),
    ("other arrays", "other arrays.npz is an .npz archive but not a trace file: it lacks"),
])
def test_a_trace_option_that_names_no_trace_file_stops_before_the_server(tmp_path, capsys, started, kind,
                                                                          said) -> None:
    path = _not_a_trace(tmp_path, kind)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--trace", str(path), "--headless"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "attention-atlas: error: --trace: " in err and said in err, err
    assert "Traceback" not in err
    assert not started


def test_a_trace_file_reaches_the_app_by_its_absolute_path(tmp_path, monkeypatch, started) -> None:
    from attention_atlas.ui.url_state import OPEN_MODEL_VARIABLE, TRACE_FILE_VARIABLE

    load_runner("toy-reverse").run("abc").save(tmp_path / "t.npz")
    monkeypatch.chdir(tmp_path)
    command, environment = cli.streamlit_arguments(["--trace", "t.npz", "--port", "8600", "--server.runOnSave",
                                                    "true"])
    assert environment == {TRACE_FILE_VARIABLE: str((tmp_path / "t.npz").resolve())}
    assert command[:2] == ["run", str(cli.FRAME)] and command[-2:] == ["--server.runOnSave", "true"]
    assert cli.main(["--trace", "t.npz", "--model", "toy-date", "--headless"]) == 0
    [(command, environment)] = started
    assert "--server.headless" in command and "--trace" not in command
    assert environment == {TRACE_FILE_VARIABLE: str((tmp_path / "t.npz").resolve()), OPEN_MODEL_VARIABLE: "toy-date"}


def test_python_m_attention_atlas_is_the_command_and_imports_no_streamlit_for_help() -> None:
    """`python -m attention_atlas --help` prints the command's help; the modules it imported (-X importtime lists
    them on stderr) hold no Streamlit: the command imports it only to serve."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "attention_atlas", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: attention-atlas ") and "attention-atlas trace" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "attention_atlas.cli" in imported
    assert not {name for name in imported if name.split(".")[0] in {"streamlit", "torch"}}


def test_explain_has_its_own_help(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["explain", "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attention-atlas explain ") and "--query" in out and "--key" in out


def test_explain_prints_a_scores_parts_and_writes_every_share(tmp_path, capsys) -> None:
    """The command's numbers are Model.explain_score's: the induction head of toy-induction, from the second 'r' to
    the 't' after the first, led on the key side by what layer 0's head 3 wrote there."""
    import json

    import attention_atlas as aa

    out = tmp_path / "e.json"
    arguments = ["--model", "toy-induction", "--text", "qwertyuiop", "--layer", "1", "--head", "2", "--query", "14"]
    assert cli.main(["explain", *arguments, "--key", "5", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    found = aa.load("toy-induction").explain_score("qwertyuiop", layer=1, head=2, query=14, key=5)
    assert (summary["query_token"], summary["key_token"]) == ("r", "t")
    assert summary["score"] == pytest.approx(found.score) and summary["key_side"][0]["part"] == "L0H3"
    every = json.loads(out.read_text())
    assert sum(every["key_shares"]) == pytest.approx(found.score, rel=1e-4)
    assert np.asarray(every["pairs"]).shape == (len(every["query_parts"]), len(every["key_parts"]))
    assert cli.main(["explain", *arguments[:-1], "3", "--key", "5"]) == 2  # a key after the query: hidden
    assert "the mask hides it" in capsys.readouterr().err
