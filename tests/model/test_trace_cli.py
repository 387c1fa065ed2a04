"""`attention-atlas trace`: lists models, writes a Trace file that loads back, refuses bad input clearly."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_atlas import load_trace
from attention_atlas.cli import main
from attention_atlas.model.registry import list_model_ids
from tests.tiny_hf import build

COMMAND = Path(sys.executable).parent / "attention-atlas"  # the entry point pip installed beside this Python


def _cli(*args: str) -> subprocess.CompletedProcess:
    """`attention-atlas trace *args` run in this process (the command's main): the exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["trace", *args])
        except SystemExit as stopped:  # argparse's own errors
            code = stopped.code
    return subprocess.CompletedProcess(["attention-atlas", "trace", *args], code, out.getvalue(), err.getvalue())


def test_the_installed_command_traces_and_writes_a_file(tmp_path: Path) -> None:
    """The entry point itself, once, in a folder other than the repository's: `attention-atlas trace`."""
    done = subprocess.run([str(COMMAND), "trace", "--model", "toy-reverse", "--text", "abc", "--out", "t.npz"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output_text"] == "cba"
    assert load_trace(tmp_path / "t.npz").output_text == "cba"


def test_list_prints_one_model_id_a_line() -> None:
    result = _cli("--list")
    assert result.returncode == 0
    assert result.stdout.splitlines() == list_model_ids()


def test_trace_file_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "trace.npz"
    result = _cli("--model", "toy-reverse", "--text", "hello world", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["model_id"] == "toy-reverse"
    assert summary["output_text"] == "dlrow olleh"
    assert summary["tokens"] == [*"hello world", "</s>"]
    assert summary["hooks"]["encoder.0.attn.hook_pattern"] == [4, 12, 12]
    trace = load_trace(out)
    assert trace.output_text == "dlrow olleh"
    assert trace.facts.model_id == "toy-reverse"
    assert trace.facts.n_heads == 4
    assert len(trace.steps) == 12 and trace.steps[-1].token_id == 2
    assert trace.masks["decoder.attn"].dtype == bool
    assert set(trace.captured) == set(summary["hooks"])
    np.testing.assert_allclose(trace.attention["decoder.0.cross_attn.hook_pattern"].sum(-1), 1.0, atol=1e-5)


def test_target_causal_and_hook_filter(tmp_path: Path) -> None:
    result = _cli("--model", "toy-date", "--text", "may 1 2000", "--target", "2000-05-01", "--causal", "on",
                  "--hooks", "*.hook_pattern")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["target_tokens"] == ["<s>", *"2000-05-01"]
    assert all(name.endswith("hook_pattern") for name in summary["hooks"])
    assert len(summary["hooks"]) == 2 + 2 * 2


def test_a_hugging_face_folder(tmp_path: Path) -> None:
    folder = build("llama", tmp_path / "llama")
    out = tmp_path / "llama.npz"
    result = _cli("--model", str(folder), "--text", "the quick brown fox", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["tokens"] == ["<s>", "the", "quick", "brown", "fox"]
    assert summary["hooks"]["decoder.1.attn.hook_pattern"] == [4, 5, 5]
    trace = load_trace(out)
    assert trace.facts.n_kv_heads == 2
    assert trace.attention["decoder.0.attn.hook_pattern"].dtype == np.float16


def test_precision_is_chosen_and_recorded(tmp_path: Path) -> None:
    folder = build("llama", tmp_path / "llama")
    out = tmp_path / "llama.npz"
    result = _cli("--model", str(folder), "--text", "the quick brown fox", "--precision", "bfloat16", "--out",
                  str(out))
    assert result.returncode == 0, result.stderr
    assert load_trace(out).facts.precision == "bfloat16"
    auto = _cli("--model", str(folder), "--text", "the fox", "--device", "cpu", "--out", str(out))
    assert auto.returncode == 0 and load_trace(out).facts.precision == "float32"  # auto, on a CPU


def test_hooks_that_match_nothing_exit_with_the_names_there_are() -> None:
    result = _cli("--model", "toy-reverse", "--text", "abc", "--hooks", "*.hook_nothing")
    assert result.returncode == 2
    assert "no hook of toy-reverse matches '*.hook_nothing'; its hooks are:" in result.stderr
    assert "encoder.0.attn.hook_pattern" in result.stderr


def test_bad_text_exits_with_a_message() -> None:
    result = _cli("--model", "toy-reverse", "--text", "Hello")
    assert result.returncode == 2
    assert "error: The text contains characters this model does not know: 'H'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_dense_file_holds_every_pattern_for_numpy_alone(tmp_path: Path) -> None:
    folder = build("llama", tmp_path / "llama")
    kept, dense = tmp_path / "kept.npz", tmp_path / "dense.npz"
    for out, extra in ((kept, ()), (dense, ("--dense",))):
        result = _cli("--model", str(folder), "--text", "the quick brown fox", "--out", str(out), *extra)
        assert result.returncode == 0, result.stderr
    with np.load(dense) as data:  # no package needed: the pattern under its hook name
        assert not any(key.startswith("source:") for key in data.files)
        pattern = data["decoder.1.attn.hook_pattern"]
    with np.load(kept) as data:
        assert "decoder.1.attn.hook_pattern" not in data.files  # kept as its queries and keys
        assert "source:decoder.1.attn.hook_pattern:query" in data.files
    assert pattern.shape == (4, 5, 5) and pattern.dtype == np.float16
    np.testing.assert_array_equal(pattern, load_trace(kept).pattern("decoder.attn", 1))
    np.testing.assert_array_equal(load_trace(dense).pattern("decoder.attn", 1), pattern)


def test_a_dense_file_too_large_is_refused_with_a_message(tmp_path: Path, monkeypatch) -> None:
    from attention_atlas.model.core.trace import file as trace_file
    from attention_atlas.model.registry import load_runner

    monkeypatch.setattr(trace_file, "DENSE_BYTES_LIMIT", 100)
    trace = load_runner(str(build("llama", tmp_path / "llama"))).run("the quick brown fox")
    with pytest.raises(ValueError, match="save it without dense"):
        trace.save(tmp_path / "t.npz", dense=True)
