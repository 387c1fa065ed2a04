"""A Trace as an .npz file and back (`Trace.save`, `Trace.load`): the layout is documented in docs/hooks.md ("Reading
a trace file"), and tests/contract/test_docs.py holds the two to each other. No pickles: object arrays are refused.

This module turns a trace's fields (the dataclass's, by name) into the file's arrays and back; trace.py holds the
Trace, which reads and writes itself through it."""

from __future__ import annotations

import dataclasses
import json
import math
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.facts import DecodeStep, ModelFacts
from attention_atlas.model.core.trace.kept_masks import compact, sharing_site_masks
from attention_atlas.model.core.trace.sites import Site

DENSE_BYTES_LIMIT = 2 * 1024**3  # the whole patterns a dense file may hold (float16): made in memory before writing
FORMAT = 2  # the layout's version, written as "format"; a file without it was written before versions: 1. 2: a
# pattern source whose mask is its site's writes none of its own (`allowed`)
PLAIN = {"format", "text", "target", "tokens", "ids", "target_tokens", "target_ids", "facts", "options", "output_text",
         "output_kind", "cautions", "fallback", "step_ids"}
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
        parts = {"query": source.query, "key": source.key, "scale": np.array(source.scale)}
        parts |= {} if source.allowed is trace["masks"].get(_site(name)) else {"allowed": source.allowed}
        parts |= {} if source.bias is None else {"bias": source.bias}
        parts |= {} if source.softcap is None else {"softcap": np.array(source.softcap)}
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


def read_arrays(path: Source, name: str = "", max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Every array of a trace file, checked to be one this version reads: NotATraceFile otherwise. name: how
    messages call the file (default: its path's name); max_bytes: the most its arrays may take once decompressed."""
    name = name or (Path(path).name if isinstance(path, str | Path) else "the file")
    if max_bytes is not None:
        _check_size(path, name, max_bytes)
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise NotATraceFile(f"{name} is a single numpy array, not a trace file (an .npz archive).")
            arrays = {k: data[k] for k in data.files}
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise NotATraceFile(f"{name} is not a trace file: it cannot be read as a numpy .npz archive.") from error
    except ValueError as error:  # numpy: not its format (it would read the bytes as a pickle), or object arrays
        raise NotATraceFile(f"{name} is not a trace file: it cannot be read as a numpy .npz archive without "
                            "unpickling, which this app never does.") from error
    missing = sorted(REQUIRED - set(arrays))
    if missing:
        raise NotATraceFile(f"{name} is an .npz archive but not a trace file: it lacks {', '.join(missing)}.")
    version = int(arrays["format"]) if "format" in arrays else 1
    if version > FORMAT:
        raise NotATraceFile(f"{name} was written by a newer Attention Atlas (trace format {version}; this one reads "
                            f"up to {FORMAT}): update attention-atlas to open it.")
    return arrays


def _check_size(source: Source, name: str, max_bytes: int) -> None:
    """NotATraceFile when the archive's members would take more than `max_bytes` decompressed (read from its
    directory, before anything is decompressed: a small upload may hold gigabytes of zeros)."""
    try:
        with zipfile.ZipFile(source) as archive:
            size = sum(member.file_size for member in archive.infolist())
    except zipfile.BadZipFile as error:
        raise NotATraceFile(f"{name} is not a trace file: it cannot be read as a numpy .npz archive.") from error
    finally:
        if not isinstance(source, str | Path):
            source.seek(0)
    if size > max_bytes:
        raise NotATraceFile(f"{name} holds {size / 1024**2:,.0f} MiB of arrays; this server opens trace files of up "
                            f"to {max_bytes / 1024**2:,.0f} MiB. Save a shorter run, or fewer hooks.")


def read(path: Source, name: str = "", max_bytes: int | None = None) -> dict[str, Any]:
    """The fields of the Trace written to `path` (`Trace(**read(path))`); NotATraceFile for a file that is not one,
    or is damaged (`read_arrays` for the arguments)."""
    arrays = read_arrays(path, name, max_bytes)
    try:
        return _fields(arrays)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as error:
        label = name or (Path(path).name if isinstance(path, str | Path) else "the file")
        raise NotATraceFile(f"{label} is damaged: its {error} cannot be read as a trace's.") from error


def _fields(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The Trace's fields from a trace file's arrays."""
    prefixed: dict[str, dict[str, np.ndarray]] = {"mask:": {}, "output:": {}, "step:": {}, "source:": {}}
    captured: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        prefix = next((p for p in prefixed if key.startswith(p)), None)
        if prefix:
            prefixed[prefix][key[len(prefix):]] = value
        elif key not in PLAIN:
            captured[key] = value
    step_arrays = prefixed["step:"]  # "<i>:<hook name>" -> (heads, k_len)
    steps = [
        DecodeStep(int(token_id), {k.split(":", 1)[1]: v for k, v in step_arrays.items() if k.startswith(f"{i}:")})
        for i, token_id in enumerate(arrays["step_ids"].tolist())
    ]
    parts: dict[str, dict[str, np.ndarray]] = {}  # hook name -> part -> array
    for key, value in prefixed["source:"].items():
        name, part = key.rsplit(":", 1)
        parts.setdefault(name, {})[part] = value
    masks = {site: compact(mask) for site, mask in prefixed["mask:"].items()}
    sources = {name: PatternSource(query=p["query"], key=p["key"], scale=float(p["scale"]),
                                   allowed=p["allowed"] if "allowed" in p else masks[_site(name)], bias=p.get("bias"),
                                   softcap=float(p["softcap"]) if "softcap" in p else None)
               for name, p in parts.items()}
    return {
        "facts": ModelFacts(**json.loads(str(arrays["facts"]))),
        "tokens": arrays["tokens"].tolist(),
        "ids": arrays["ids"].tolist(),
        "target_tokens": arrays["target_tokens"].tolist(),
        "target_ids": arrays["target_ids"].tolist(),
        "masks": masks,
        "captured": captured,
        "outputs": prefixed["output:"],
        "output_text": str(arrays["output_text"]),
        "options": RunOptions.from_record(json.loads(str(arrays["options"]))),
        "steps": steps,
        "pattern_sources": sharing_site_masks(sources, masks),
        "output_kind": str(arrays["output_kind"]) if "output_kind" in arrays else "generated",
        "cautions": tuple(json.loads(str(arrays["cautions"]))) if "cautions" in arrays else (),
        "fallback": str(arrays["fallback"]) if "fallback" in arrays else "",
        "text": str(arrays["text"]) if "text" in arrays else "",
        "target": json.loads(str(arrays["target"])) if "target" in arrays else None,
    }


def _site(hook_name: str) -> str:
    """The site of a pattern's hook name, as its mask is keyed ("decoder.3.attn.hook_pattern" -> "decoder.attn")."""
    return Site.of_pattern(hook_name)[0].name
