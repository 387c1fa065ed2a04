"""Damaged trace files: real small ones (a toy encoder-decoder's, with its decoding steps, and a tiny Llama's, with
its pattern sources) with bytes flipped, cut short, members dropped, doubled or replaced by junk or by arrays of
any dtype and shape; archives of many members, a member of many zeros, bytes that are no archive, a lone .npy.
Each opens as a Trace, or is refused with NotATraceFile and a sentence, within a second."""

from __future__ import annotations

import io
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attention_atlas import load
from attention_atlas.model.core.trace.file import NotATraceFile
from attention_atlas.model.core.trace.trace import Trace
from tests.fuzz.outcomes import counter, examples, is_sentence, within_limit
from tests.tiny_hf import build

NAME = "x.npz"  # how the messages call the file
MAX_BYTES = 4 * 1024**2  # the most the arrays may take decompressed, as a server bounds an upload

Bases = dict[str, bytes]
Member = tuple[str, bytes]  # a zip member: its name, its bytes


@dataclass(frozen=True)
class Damaged:
    """A damaged file's bytes, shown in a failure's report by what was done to it."""

    what: str
    data: bytes = field(repr=False)


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> Bases:
    """The undamaged files: toy-reverse's run (captured patterns, decoding steps) and a tiny random Llama's
    (pattern sources: queries, keys, scales)."""
    folder = build("llama", tmp_path_factory.mktemp("fuzz") / "llama")
    files = {}
    for label, trace in (("toy-reverse", load("toy-reverse").run("abc")), ("llama", load(str(folder)).run("the cat"))):
        buffer = io.BytesIO()
        trace.save(buffer)
        files[label] = buffer.getvalue()
    return files


def _members(data: bytes) -> list[Member]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _archive(members: list[Member], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # a doubled member's name ("Duplicate name") is part of the damage
        warnings.simplefilter("ignore", UserWarning)
        with zipfile.ZipFile(buffer, "w", compression) as archive:
            for name, data in members:
                archive.writestr(name, data)
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)  # an object array is written as a pickle: the reader must refuse it
    return buffer.getvalue()


DTYPES = st.one_of(hnp.scalar_dtypes(), hnp.unicode_string_dtypes(), hnp.byte_string_dtypes(),
                   hnp.array_dtypes(hnp.scalar_dtypes(), min_size=1, max_size=3))
ARRAYS = st.one_of(
    hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3)), max_size=4).map(
        lambda items: np.array([*items, None], dtype=object)),  # object arrays
    st.sampled_from(["{}", "[]", "null", '{"model_id": 1}', "not json", "9" * 30, "-1", "nan"]).map(np.array),
)


@st.composite
def _edited(draw, bases: Bases) -> Damaged:
    """A real file's members dropped, doubled, replaced by junk bytes or by other arrays, or new ones added."""
    base = draw(st.sampled_from(sorted(bases)))
    members = _members(bases[base])
    names = [name for name, _ in members]
    done = []
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(["drop", "double", "junk", "array", "add"]))
        name = draw(st.sampled_from(names))
        done.append(f"{edit} {name}")
        if edit == "drop":
            members = [m for m in members if m[0] != name]
        elif edit == "double":
            members += [m for m in members if m[0] == name][:1]
        elif edit == "add":
            members.append(("m" + draw(st.text(max_size=12)) + draw(st.sampled_from([".npy", ""])),  # not "/"
                            _npy(draw(ARRAYS))))
        else:
            new = draw(st.binary(max_size=64)) if edit == "junk" else _npy(draw(ARRAYS))
            members = [(n, new if n == name else data) for n, data in members]
    compression = draw(st.sampled_from([zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED]))
    return Damaged(f"{base}: {', '.join(done)}", _archive(members, compression))


@st.composite
def _flipped(draw, bases: Bases) -> Damaged:
    """A real file with bytes changed at random offsets (its members' headers, its directory, its arrays)."""
    base = draw(st.sampled_from(sorted(bases)))
    data = bytearray(bases[base])
    flips = draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(1, 255)), min_size=1, max_size=8))
    for offset, mask in flips:
        data[offset] ^= mask
    return Damaged(f"{base} with bytes flipped: {flips}", bytes(data))


@st.composite
def _cut(draw, bases: Bases) -> Damaged:
    base = draw(st.sampled_from(sorted(bases)))
    end = draw(st.integers(0, len(bases[base]) - 1))
    return Damaged(f"{base} cut at byte {end}", bases[base][:end])


@st.composite
def _many_members(draw, bases: Bases) -> Damaged:
    """Thousands of tiny members, with or without a real file's."""
    count = draw(st.integers(200, 2000))
    real = _members(bases["toy-reverse"]) if draw(st.booleans()) else []
    tiny = _npy(np.zeros(0, np.int8))
    return Damaged(f"{count} tiny members{' and a real file' if real else ''}",
                   _archive(real + [(f"m{i}.npy", tiny) for i in range(count)]))


@st.composite
def _many_zeros(draw, bases: Bases) -> Damaged:
    """A member whose few compressed kilobytes hold more than MAX_BYTES of zeros."""
    size = draw(st.integers(MAX_BYTES + 1, 4 * MAX_BYTES))
    return Damaged(f"{size:,} bytes of zeros",
                   _archive([*_members(bases["llama"]), ("zeros.npy", _npy(np.zeros(size, np.uint8)))]))


def _not_an_archive() -> st.SearchStrategy[Damaged]:
    prefix = st.sampled_from([b"", b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY", b"\x80\x04", b"\x1f\x8b"])
    loose = st.tuples(prefix, st.binary(max_size=512)).map(lambda parts: Damaged(f"bytes {parts!r}", b"".join(parts)))
    lone = ARRAYS.map(lambda array: Damaged(f"a lone .npy of {array.dtype!r} {array.shape}", _npy(array)))
    return st.one_of(loose, lone)


def _damaged(bases: Bases) -> st.SearchStrategy[Damaged]:
    return st.one_of(_edited(bases), _flipped(bases), _cut(bases), _not_an_archive(), _many_members(bases),
                     _many_zeros(bases))


def _open(damaged: Damaged, counts: Counter[str]) -> None:
    """Trace.load on the bytes (file.read under it): a Trace, or NotATraceFile with a sentence, within the limit."""
    with within_limit(lambda: damaged.what):
        try:
            trace = Trace.load(io.BytesIO(damaged.data), name=NAME, max_bytes=MAX_BYTES)
        except NotATraceFile as error:
            assert is_sentence(str(error), NAME), (damaged.what, str(error))
            counts["refused with a sentence"] += 1
            return
    assert isinstance(trace, Trace), damaged.what
    counts["opened"] += 1


def test_a_damaged_trace_file_opens_or_is_refused_with_a_sentence(bases: Bases) -> None:
    counts = counter("test_fuzz_trace_files: damaged files")
    for data in bases.values():  # the bases themselves open: the damage, not the files, makes each refusal
        assert isinstance(Trace.load(io.BytesIO(data), name=NAME, max_bytes=MAX_BYTES), Trace)

    @examples(300)
    @given(_damaged(bases))
    def check(damaged: Damaged) -> None:
        _open(damaged, counts)

    check()
    assert counts["opened"] and counts["refused with a sentence"], counts  # both kinds were tried


def test_a_trace_file_on_disk_is_refused_by_its_name(tmp_path: Path) -> None:
    """A path's name is the message's subject when no name is given."""
    path = tmp_path / "broken.npz"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(NotATraceFile) as refused:
        Trace.load(path)
    assert is_sentence(str(refused.value), "broken.npz") and str(refused.value).startswith("broken.npz")
