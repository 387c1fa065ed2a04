"""A Trace as an .npz file and back: the layout is documented in docs/hooks.md ("Reading a trace file"), and
tests/contract/test_docs.py holds the two to each other. No pickles: object arrays are refused."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from model.core.attention.source import PatternSource
from model.core.options import RunOptions
from model.core.trace.trace import DecodeStep, ModelFacts, Trace

DENSE_BYTES_LIMIT = 2 * 1024**3  # the whole patterns a dense file may hold (float16): made in memory before writing


def save_trace(trace: Trace, path: str | Path, dense: bool = False) -> None:
    """Write `trace` to an .npz file (layout in docs/hooks.md). dense: every pattern kept as its source is written
    whole under its hook name, (heads, q_len, k_len) float16, instead of its source; ValueError past
    DENSE_BYTES_LIMIT."""
    arrays: dict[str, np.ndarray] = {
        "tokens": np.array(trace.tokens, dtype=str),
        "ids": np.array(trace.ids, dtype=np.int64),
        "target_tokens": np.array(trace.target_tokens, dtype=str),
        "target_ids": np.array(trace.target_ids, dtype=np.int64),
        "facts": np.array(json.dumps(dataclasses.asdict(trace.facts))),
        "options": np.array(json.dumps(trace.options.record())),
        "output_text": np.array(trace.output_text),
        "output_kind": np.array(trace.output_kind),
        "cautions": np.array(json.dumps(list(trace.cautions))),
        "fallback": np.array(trace.fallback),
        "step_ids": np.array([s.token_id for s in trace.steps], dtype=np.int64),
    }
    arrays.update({f"mask:{k}": v for k, v in trace.masks.items()})
    arrays.update(trace.captured)
    arrays.update({f"output:{k}": v for k, v in trace.outputs.items()})
    if dense:
        dense_bytes = sum(2 * math.prod(source.shape) for source in trace.pattern_sources.values())
        if dense_bytes > DENSE_BYTES_LIMIT:
            raise ValueError(f"the whole attention patterns of this run are {dense_bytes / 1024**3:.1f} GiB, more "
                             f"than the {DENSE_BYTES_LIMIT / 1024**3:.0f} GiB a dense file may hold; write the file "
                             "without --dense and read patterns with load_trace")
        arrays.update({name: source.pattern() for name, source in trace.pattern_sources.items()})
    for name, source in ({} if dense else trace.pattern_sources).items():
        parts = {"query": source.query, "key": source.key, "scale": np.array(source.scale), "allowed": source.allowed}
        parts |= {} if source.bias is None else {"bias": source.bias}
        parts |= {} if source.softcap is None else {"softcap": np.array(source.softcap)}
        arrays.update({f"source:{name}:{part}": value for part, value in parts.items()})
    for i, step in enumerate(trace.steps):
        arrays.update({f"step:{i}:{k}": v for k, v in step.attention.items()})
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)


def load_trace(path: str | Path) -> Trace:
    """Read a Trace written by `save_trace` (no pickles: object arrays are refused)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    prefixed = {"mask:": {}, "output:": {}, "step:": {}, "source:": {}}
    captured: dict[str, np.ndarray] = {}
    plain = {"tokens", "ids", "target_tokens", "target_ids", "facts", "options", "output_text", "output_kind",
             "cautions", "fallback", "step_ids"}
    for key, value in arrays.items():
        prefix = next((p for p in prefixed if key.startswith(p)), None)
        if prefix:
            prefixed[prefix][key[len(prefix):]] = value
        elif key not in plain:
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
    sources = {name: PatternSource(query=p["query"], key=p["key"], scale=float(p["scale"]), allowed=p["allowed"],
                                   bias=p.get("bias"), softcap=float(p["softcap"]) if "softcap" in p else None)
               for name, p in parts.items()}
    return Trace(
        facts=ModelFacts(**json.loads(str(arrays["facts"]))),
        tokens=arrays["tokens"].tolist(),
        ids=arrays["ids"].tolist(),
        target_tokens=arrays["target_tokens"].tolist(),
        target_ids=arrays["target_ids"].tolist(),
        masks=prefixed["mask:"],
        captured=captured,
        outputs=prefixed["output:"],
        output_text=str(arrays["output_text"]),
        options=RunOptions.from_record(json.loads(str(arrays["options"]))),
        steps=steps,
        pattern_sources=sources,
        output_kind=str(arrays["output_kind"]) if "output_kind" in arrays else "generated",
        cautions=tuple(json.loads(str(arrays["cautions"]))) if "cautions" in arrays else (),
        fallback=str(arrays["fallback"]) if "fallback" in arrays else "",
    )
