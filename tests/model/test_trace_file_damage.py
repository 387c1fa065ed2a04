"""Damaged trace files: seeded damaged copies of real small trace files (bytes flipped, cut short, members dropped,
replaced by junk or by arrays of the wrong dtype or shape), other files (.npy, not a zip), a 50,000-member archive
and zip bombs. Each opens as a trace that works, or is refused with NotATraceFile saying why in a sentence: never
another exception. A trace's arrays are read-only (every session shares one)."""

from __future__ import annotations

import io
import random
import struct
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attention_atlas import load, load_trace
from attention_atlas.model.core.trace.file import NotATraceFile
from attention_atlas.model.core.trace.trace import Trace
from tests.tiny_hf import build

NAME = "damaged.npz"
QUICK_S = 0.5  # a refusal read from the archive's directory takes far less (about 10 ms here)


@pytest.fixture(scope="module")
def originals(tmp_path_factory) -> dict[str, bytes]:
    """Two real trace files: a toy encoder-decoder's every hook with its decoding steps, and a tiny Llama's kept
    pattern sources."""
    folder = build("llama", tmp_path_factory.mktemp("llama") / "llama")
    files = {}
    for kind, trace in {"toy": load("toy-date").run("may 1 2000", hooks="*"),
                        "llama": load(folder).run("the quick fox", hooks=("*pattern", "*resid_post"))}.items():
        buffer = io.BytesIO()
        trace.save(buffer)
        files[kind] = buffer.getvalue()
    return files


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _array(data: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(data))


def _wrong_arrays(array: np.ndarray, rng: random.Random) -> list[np.ndarray]:
    """Arrays a member must not hold in place of `array`: other dtypes, other shapes."""
    flat = array.reshape(-1)
    return [np.zeros(array.shape, dtype=rng.choice([np.float64, np.int8, np.bool_, np.complex64])),
            np.array([str(v) for v in flat[:3]]), np.array(rng.random()), flat, array[None],
            flat[:-1] if flat.size else np.zeros(2), np.array([{"a": 1}, None], dtype=object)]


def _damaged(original: bytes, seed: int) -> Iterator[tuple[str, bytes]]:
    """(how, bytes): about 150 damaged copies of one trace file."""
    rng = random.Random(seed)
    members = _members(original)
    names = sorted(members)
    for i in range(60):
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        yield f"flipped #{i}", bytes(damaged)
    for i in range(30):
        yield f"cut #{i}", original[: rng.randrange(len(original))]
    for name in rng.sample(names, 8):
        yield f"{name} dropped", _zip({k: v for k, v in members.items() if k != name})
        yield f"{name} junk", _zip({**members, name: rng.randbytes(rng.randrange(64))})
        for wrong in _wrong_arrays(_array(members[name]), rng):
            yield f"{name} as {wrong.dtype} {wrong.shape}", _zip({**members, name: _npy(wrong)})
    for field, value in [("facts", "[]"), ("facts", '{"model_id": 3}'), ("options", '{"causal": 1}'),
                         ("cautions", '"x"'), ("target", "5"), ("facts", "{not json")]:
        yield f"{field} = {value}", _zip({**members, f"{field}.npy": _npy(np.array(value))})
    yield "junk member", _zip({**members, "junk.npy": _npy(np.zeros(3))})
    yield "not an array", _zip({**members, "notes.txt": b"hello"})


def _outcome(data: bytes, max_bytes: int | None = None) -> str:
    """"opened" (and the trace works) or the refusal's message, checked to be a sentence; any other exception
    fails the test."""
    try:
        trace = Trace.load(io.BytesIO(data), name=NAME, max_bytes=max_bytes)
    except NotATraceFile as error:
        message = str(error)
        assert message.startswith(NAME) and message.endswith(".") and "\n" not in message, message
        assert 30 < len(message) < 400, message
        return message
    trace.summary()
    for site in trace.sites():
        for layer in range(trace.n_layers(site)):
            if trace.pattern_name(site, layer) in trace:
                assert trace.pattern(site, layer).shape[1:] == (len(trace.query_tokens(site)),
                                                               len(trace.key_tokens(site)))
    return "opened"


@pytest.mark.parametrize("kind", ["toy", "llama"])
def test_every_damaged_copy_opens_or_is_refused_with_a_sentence(originals: dict[str, bytes], kind: str) -> None:
    outcomes = {how: _outcome(data) for how, data in _damaged(originals[kind], seed=len(kind))}
    assert len(outcomes) > 100
    assert _outcome(originals[kind]) == "opened"
    refused = {how: message for how, message in outcomes.items() if message != "opened"}
    assert all(how in refused for how in outcomes if " as object" in how or ("dropped" in how and any(
        f"{field}.npy" in how for field in ("tokens", "ids", "facts", "options", "step_ids")))), outcomes
    assert all(how in refused for how in outcomes if "=" in how or how in ("junk member", "not an array"))
    assert sum(how.startswith("flipped") for how in refused) > 40  # the members' CRCs and headers catch most


def test_other_files_are_refused_with_a_sentence(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", np.arange(4))
    with pytest.raises(NotATraceFile, match=r"^one.npy is a single numpy array \(.npy\), not a trace file"):
        load_trace(tmp_path / "one.npy")
    for data in (b"", b"not a zip at all", random.Random(1).randbytes(5000), _npy(np.arange(4))):
        assert _outcome(data).startswith(NAME + " is ")
    arrays = io.BytesIO()
    np.savez(arrays, a=np.arange(3))
    assert "it lacks facts, ids, options" in _outcome(arrays.getvalue())
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.npz")


def test_an_archive_of_50000_members_is_refused_quickly() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(50_000):
            archive.writestr(f"m{i}.npy", b"")
    data = buffer.getvalue()
    start = time.perf_counter()
    message = _outcome(data)
    assert time.perf_counter() - start < QUICK_S
    assert message == f"{NAME} is not a trace file: it holds 50,000 members, and a trace file at most 10,000."


def test_zip_bombs_are_refused_from_the_directory(originals: dict[str, bytes]) -> None:
    members = _members(originals["toy"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            if name != "encoder.0.hook_resid_post.npy":
                archive.writestr(name, data)
        with archive.open("encoder.0.hook_resid_post.npy", "w") as member:  # 128 MiB of zeros in about 128 KiB
            for _ in range(128):
                member.write(bytes(1 << 20))
    bomb = buffer.getvalue()
    start = time.perf_counter()
    assert "holds 128.3 MiB of arrays; this server opens trace files of up to 64.0 MiB" in _outcome(bomb, 64 << 20)
    assert time.perf_counter() - start < QUICK_S
    lying = bytearray(_zip(members, zipfile.ZIP_DEFLATED))
    entry = lying.rfind(b"PK\x01\x02", 0, lying.rfind(b"target_tokens.npy"))  # its directory entry: says 2 GiB
    struct.pack_into("<I", lying, entry + 24, 0x7FFFFFFF)
    assert "is damaged or a zip bomb: its target_tokens would decompress to" in _outcome(bytes(lying))
    lzma = _zip(members, zipfile.ZIP_LZMA)
    assert "compressed in a way numpy never writes" in _outcome(lzma)


def test_a_traces_arrays_are_read_only(originals: dict[str, bytes]) -> None:
    ran = load("toy-date").run("may 1 2000", hooks="*")
    loaded = Trace.load(io.BytesIO(originals["llama"]))
    arrays = [ran.captured["decoder.0.attn.hook_pattern"], ran.masks["encoder.attn"], ran.steps[0].attention[
        "decoder.0.attn.hook_pattern"], ran.outputs["log_probs"], *loaded.pattern_sources[
        "decoder.0.attn.hook_pattern"].arrays(), loaded.captured["decoder.1.hook_resid_post"]]
    for array in arrays:
        with pytest.raises(ValueError, match="read-only"):
            array[(0,) * array.ndim] = 1
    assert (loaded.pattern("decoder.attn", 0).sum(-1) > 0.99).all()  # computed from read-only sources
