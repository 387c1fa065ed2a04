"""A Trace as an .npz file and back (`Trace.save`, `Trace.load`): the layout is documented in docs/hooks.md ("Reading
a trace file"), and tests/contract/test_docs.py holds the two to each other. No pickles: object arrays are refused.

This module turns a trace's fields (the dataclass's, by name) into the file's arrays and back; trace.py holds the
Trace, which reads and writes itself through it."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import zipfile
import zlib
from pathlib import Path
from tokenize import TokenError
from typing import IO, Any

import numpy as np

from attention_atlas.model.core.attention.arrays import RowScaled
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.file_fields import fields_of
from attention_atlas.model.core.trace.sites import Site

DENSE_BYTES_LIMIT = 2 * 1024**3  # the whole patterns a dense file may hold (float16): made in memory before writing
FORMAT = 2  # the layout's version, written as "format"; a file without it was written before versions: 1. 2: a
# pattern source whose mask is its site's writes none of its own (`allowed`)
REQUIRED = {"tokens", "ids", "target_tokens", "target_ids", "facts", "options", "output_text", "step_ids"}


class NotATraceFile(UserError):
    """A file that is not a trace file this version can read; the message says why, in a sentence."""


def write(path: str | Path | IO[bytes], trace: dict[str, Any], dense: bool = False) -> None:
    """Write a trace's fields to an .npz file. dense: every pattern kept as its source is written whole under its
    hook name, (heads, q_len, k_len) float16, instead of its source; ValueError past DENSE_BYTES_LIMIT."""
    sources: dict[str, PatternSource] = trace["pattern_sources"]
    arrays: dict[str, np.ndarray] = {
        "format": np.array(FORMAT),
        "text": np.array(trace["text"]),
        "target": np.array(json.dumps(trace["target"])),  # JSON: null where the model made its own output
        "tokens": np.array(trace["tokens"], dtype=str),
        "ids": np.array(trace["ids"], dtype=np.int64),
        "target_tokens": np.array(trace["target_tokens"], dtype=str),
        "target_ids": np.array(trace["target_ids"], dtype=np.int64),
        "facts": np.array(json.dumps(dataclasses.asdict(trace["facts"]))),
        "options": np.array(json.dumps(trace["options"].record())),
        "output_text": np.array(trace["output_text"]),
        "output_kind": np.array(trace["output_kind"]),
        "cautions": np.array(json.dumps(list(trace["cautions"]))),
        "fallback": np.array(trace["fallback"]),
        "step_ids": np.array([s.token_id for s in trace["steps"]], dtype=np.int64),
    }
    arrays.update({f"mask:{k}": v for k, v in trace["masks"].items()})
    arrays.update(trace["captured"])
    arrays.update({f"output:{k}": v for k, v in trace["outputs"].items()})
    if dense:
        dense_bytes = sum(2 * math.prod(source.shape) for source in sources.values())
        if dense_bytes > DENSE_BYTES_LIMIT:
            raise UserError(f"the whole attention patterns of this run are {dense_bytes / 1024**3:.1f} GiB, more "
                             f"than the {DENSE_BYTES_LIMIT / 1024**3:.0f} GiB a dense file may hold; save it "
                             "without dense and read its patterns with load_trace")
        arrays.update({name: source.pattern() for name, source in sources.items()})
    for name, source in ({} if dense else sources).items():
        parts = {"scale": np.array(source.scale)}
        for part, kept in (("query", source.query), ("key", source.key)):  # a RowScaled as its steps and scales
            parts |= {part: kept.steps, f"{part}_scale": kept.scales} if isinstance(kept, RowScaled) else {part: kept}
        parts |= {} if source.allowed is trace["masks"].get(_site(name)) else {"allowed": source.allowed}
        parts |= {} if source.bias is None else {"bias": source.bias}
        parts |= {} if source.softcap is None else {"softcap": np.array(source.softcap)}
        parts |= {} if source.sinks is None else {"sinks": np.asarray(source.sinks, dtype=np.float32)}
        arrays.update({f"source:{name}:{part}": value for part, value in parts.items()})
    for i, step in enumerate(trace["steps"]):
        arrays.update({f"step:{i}:{k}": v for k, v in step.attention.items()})
    if not isinstance(path, str | Path):  # a file already open (a download's buffer)
        _savez(path, arrays)
        return
    with open(path, "wb") as f:
        _savez(f, arrays)


def _savez(file: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """An .npz archive as numpy writes one (`np.load` reads it), each array a member `<key>.npy`: numbers of 16 bits
    or more stored as they are (queries, keys, activations: deflating them made a file 7% smaller and its saving 26
    times slower, `bench.trace_file`), everything else (masks, ids, text) deflated."""
    with zipfile.ZipFile(file, "w", allowZip64=True) as archive:
        for key, value in arrays.items():
            member = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_STORED if value.dtype.kind in "fiu" and value.itemsize >= 2 \
                else zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)


Source = str | Path | IO[bytes]  # a file's path, or the file itself (an upload)
MAX_MEMBERS = 10_000  # arrays a trace file may hold (an 80-layer model's every hook and source: about 2,000)
MAX_RATIO = 1_100  # the most a member may decompress to, times its compressed size: deflate reaches 1,032 at most,
# so only a directory that lies about its sizes exceeds it
NPY_MAGIC = b"\x93NUMPY"
READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, struct.error, TokenError, RuntimeError,
               NotImplementedError)  # what zipfile, zlib and numpy's header parser raise on damaged bytes


def read(path: Source, name: str = "", max_bytes: int | None = None) -> dict[str, Any]:
    """The fields of the Trace written to `path` (`Trace(**read(path))`); NotATraceFile, with a sentence, for a file
    that is not one or is damaged, whatever the damage (`read_arrays` for the arguments)."""
    label = _label(path, name)
    arrays = read_arrays(path, label, max_bytes)
    try:
        return fields_of(arrays)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
        reason = error.args[0] if type(error) is ValueError and error.args else \
            "its arrays are not the ones a trace writes, of the shapes it writes them"
        raise NotATraceFile(f"{label} is damaged: {reason}.") from error


def read_arrays(path: Source, name: str = "", max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Every array of a trace file (read-only), checked to be one this version reads: NotATraceFile otherwise. name:
    how messages call the file (default: its path's name); max_bytes: the most its arrays may take decompressed.
    The archive's directory is checked before any member is read (`_members`); each member's header before its data."""
    name = _label(path, name)
    if not isinstance(path, str | Path):
        path.seek(0)
        return _arrays(path, name, max_bytes)
    with open(path, "rb") as opened:
        return _arrays(opened, name, max_bytes)


def _label(path: Source, name: str) -> str:
    return name or (Path(path).name if isinstance(path, str | Path) else "the file")


def _arrays(source: IO[bytes], name: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    if source.read(len(NPY_MAGIC)) == NPY_MAGIC:
        raise NotATraceFile(f"{name} is a single numpy array (.npy), not a trace file (an .npz archive of arrays).")
    source.seek(0)
    try:
        entries = _entry_count(source)
        archive = zipfile.ZipFile(source) if entries <= MAX_MEMBERS else None
    except READ_ERRORS as error:
        raise NotATraceFile(f"{name} is not a trace file: it cannot be read as a numpy .npz archive.") from error
    if archive is None:
        raise NotATraceFile(f"{name} is not a trace file: it holds {entries:,} members, and a trace file at most "
                            f"{MAX_MEMBERS:,}.")
    with archive:
        arrays = {}
        for key, info in _members(archive.infolist(), name, max_bytes).items():
            try:
                arrays[key] = _array(archive, info)
            except READ_ERRORS as error:
                raise NotATraceFile(f"{name} is damaged: its {key} cannot be read as a numpy array of numbers or "
                                    "text.") from error
    version = arrays.get("format", np.array(1))
    if version.shape != () or version.dtype.kind not in "iu":
        raise NotATraceFile(f"{name} is damaged: its format is not a version number.")
    if int(version) > FORMAT:
        raise NotATraceFile(f"{name} was written by a newer Attention Atlas (trace format {int(version)}; this one "
                            f"reads up to {FORMAT}): update attention-atlas to open it.")
    return arrays


def _entry_count(source: IO[bytes]) -> int:
    """The members an archive says it holds, read from its end record alone (zipfile reads every member's entry
    of the directory: a tenth of a second for 50,000); 0 where there is no end record (zipfile then says so)."""
    size = source.seek(0, 2)
    source.seek(max(0, size - 22 - 0xFFFF))  # the end record (22 bytes) and its comment (at most 65,535)
    tail = source.read()
    at = tail.rfind(b"PK\x05\x06")
    source.seek(0)
    return struct.unpack_from("<H", tail, at + 10)[0] if 0 <= at <= len(tail) - 22 else 0


def _members(infos: list[zipfile.ZipInfo], name: str, max_bytes: int | None) -> dict[str, zipfile.ZipInfo]:
    """The archive's members by array name, checked from its directory alone: numpy arrays only, the members a
    trace file needs, stored or deflated at a ratio deflate can reach, and at most `max_bytes` decompressed."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        key = info.filename.removesuffix(".npy")
        if key == info.filename or key in members or len(infos) > MAX_MEMBERS:
            raise NotATraceFile(f"{name} is not a trace file: its members are not the numpy arrays of one.")
        if info.flag_bits & 1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise NotATraceFile(f"{name} is not a trace file: its {key} is encrypted or compressed in a way "
                                "numpy never writes.")
        stored = info.compress_type == zipfile.ZIP_STORED
        if info.file_size > (1 if stored else MAX_RATIO) * max(info.compress_size, 1):
            raise NotATraceFile(f"{name} is damaged or a zip bomb: its {key} would decompress to "
                                f"{info.file_size / max(info.compress_size, 1):,.0f} times its size.")
        members[key] = info
    missing = sorted(REQUIRED - set(members))
    if missing:
        raise NotATraceFile(f"{name} is an .npz archive but not a trace file: it lacks {', '.join(missing)}.")
    size = sum(info.file_size for info in infos)
    if max_bytes is not None and size > max_bytes:
        raise NotATraceFile(f"{name} holds {size / 1024**2:,.1f} MiB of arrays; this server opens trace files of up "
                            f"to {max_bytes / 1024**2:,.1f} MiB. Save a shorter run, or fewer hooks.")
    return members


def _array(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One member's array, read-only: its header read first, its data only if the header's shape and dtype (numbers,
    booleans or text: never objects) fill the member exactly."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"numpy format {version} is not one numpy writes for arrays of numbers or text")
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = header(member)
        count = math.prod(shape)
        if dtype.kind not in "biufU" or dtype.fields or member.tell() + count * dtype.itemsize != info.file_size:
            raise ValueError(f"its header's {dtype} {shape} does not fill it")
        data = np.frombuffer(member.read(count * dtype.itemsize), dtype=dtype, count=count)
    array = data.reshape(shape, order="F" if fortran else "C")
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))  # written on a big-endian machine


def _site(hook_name: str) -> str:
    """The site of a pattern's hook name, as its mask is keyed ("decoder.3.attn.hook_pattern" -> "decoder.attn")."""
    return Site.of_pattern(hook_name)[0].name
