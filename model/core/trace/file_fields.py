"""A trace file's arrays as a Trace's fields, each checked to be what the Trace holds (trace/file.py reads the
arrays): a field of the wrong type or shape raises ValueError whose message says which, so that a damaged file is
refused when it is read, not by a page that draws it later."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from typing import Any

import numpy as np

from attention_atlas.model.core.attention.arrays import RowScaled
from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.options import ABLATION_MODES, RunOptions
from attention_atlas.model.core.trace.facts import DecodeStep, ModelFacts, OutputKind, Outputs
from attention_atlas.model.core.trace.hook_names import in_vocabulary, meaning
from attention_atlas.model.core.trace.kept_masks import compact, sharing_site_masks
from attention_atlas.model.core.trace.sites import PATTERN_SUFFIX, Site

PLAIN = {"format", "text", "target", "tokens", "ids", "target_tokens", "target_ids", "facts", "options", "output_text",
         "output_kind", "cautions", "fallback", "step_ids"}
SOURCE_PARTS = {"query", "key", "scale", "allowed", "bias", "softcap", "sinks", "query_scale", "key_scale"}
SITES = {"encoder.attn", "decoder.attn", "decoder.cross_attn"}
_FACT_TYPES = {f.name: f.type for f in dataclasses.fields(ModelFacts)}
_REQUIRED_FACTS = {f.name for f in dataclasses.fields(ModelFacts) if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING}


def fields_of(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The Trace's fields from a trace file's arrays; ValueError naming what is not as a trace holds it."""
    prefixed: dict[str, dict[str, np.ndarray]] = {"mask:": {}, "output:": {}, "step:": {}, "source:": {}}
    captured: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        prefix = next((p for p in prefixed if key.startswith(p)), None)
        if prefix:
            prefixed[prefix][key[len(prefix):]] = value
        elif key not in PLAIN:
            captured[_hook(key)] = _array(key, value, "biuf")
    tokens, ids = _strings(arrays, "tokens"), _ints(arrays, "ids")
    target_tokens, target_ids = _strings(arrays, "target_tokens"), _ints(arrays, "target_ids")
    if len(ids) != len(tokens) or len(target_ids) != len(target_tokens):
        raise ValueError("its token ids and tokens are not as many")
    for name, value in captured.items():
        axes = re.match(r"\(([^)]*)\)", meaning(name)).group(1).split(", ")  # "(heads, pos, d_head)"
        stack = name.split(".", 1)[0] + ".attn"
        if value.ndim != len(axes) or ("pos" in axes and value.shape[axes.index("pos")] != _lengths(
                stack, tokens, target_tokens)[0]):
            raise ValueError(f"its {name} is {value.shape}, not {meaning(name).split(':')[0]} of its tokens")
    facts = _facts(_json(arrays, "facts", dict))
    masks = {_site(site): compact(_array(f"mask:{site}", mask, np.bool_, 2))
             for site, mask in prefixed["mask:"].items()}
    for site, mask in masks.items():
        if mask.shape != _lengths(site, tokens, target_tokens):
            raise ValueError(f"its mask of {site} is {mask.shape}, not its tokens' lengths")
    sources = _sources(prefixed["source:"], masks)
    for name, shape in [*((n, v.shape) for n, v in captured.items() if n.endswith(PATTERN_SUFFIX)),
                        *((n, s.shape) for n, s in sources.items())]:
        site = Site.of_pattern(name)[0].name
        if len(shape) != 3 or site not in masks or shape != (facts.n_heads, *masks[site].shape):
            raise ValueError(f"its pattern {name} is {shape}, not (heads, queries, keys) of its mask and model")
    output_kind = _string(arrays, "output_kind", "generated")
    if output_kind not in typing.get_args(OutputKind):
        raise ValueError(f"its output kind {output_kind!r} is none of {', '.join(typing.get_args(OutputKind))}")
    cautions = _json(arrays, "cautions", list) if "cautions" in arrays else []
    target = _json(arrays, "target", str | None) if "target" in arrays else None
    if not all(isinstance(c, str) for c in cautions):
        raise ValueError("its cautions are not text")
    return {
        "facts": facts, "tokens": tokens, "ids": ids, "target_tokens": target_tokens, "target_ids": target_ids,
        "masks": masks, "captured": captured, "outputs": _outputs(prefixed["output:"]),
        "output_text": _string(arrays, "output_text", None), "options": _options(_json(arrays, "options", dict)),
        "steps": _steps(prefixed["step:"], _ints(arrays, "step_ids")),
        "pattern_sources": sharing_site_masks(sources, masks), "output_kind": output_kind, "cautions": tuple(cautions),
        "fallback": _string(arrays, "fallback", ""), "text": _string(arrays, "text", ""), "target": target,
    }


def _array(key: str, value: np.ndarray, kinds: type | str, ndim: int | None = None) -> np.ndarray:
    """`value` if its dtype is of `kinds` (a dtype, or kind letters) and it has `ndim` dimensions."""
    fits = value.dtype == kinds if isinstance(kinds, type) else value.dtype.kind in kinds
    if not fits or (ndim is not None and value.ndim != ndim):
        raise ValueError(f"its {key} is a {value.ndim}-d array of {value.dtype}, not as a trace writes it")
    return value


def _string(arrays: dict[str, np.ndarray], key: str, default: str | None) -> str:
    """A text field (a 0-d str array); `default` where the file has none (None: it must have it)."""
    if key not in arrays and default is not None:
        return default
    return str(_array(key, arrays[key], "U", 0)[()])


def _json(arrays: dict[str, np.ndarray], key: str, kind: Any) -> Any:
    """A JSON field, its value of `kind` (a type, or a union of them)."""
    try:
        value = json.loads(_string(arrays, key, None))
    except json.JSONDecodeError:
        raise ValueError(f"its {key} is not JSON") from None
    if not isinstance(value, kind):
        raise ValueError(f"its {key} is not the JSON a trace writes there")
    return value


def _strings(arrays: dict[str, np.ndarray], key: str) -> list[str]:
    return _array(key, arrays[key], "U", 1).tolist()


def _ints(arrays: dict[str, np.ndarray], key: str) -> list[int]:
    return _array(key, arrays[key], "iu", 1).tolist()


def _hook(name: str) -> str:
    if not in_vocabulary(name):
        raise ValueError(f"it holds {name!r}, which is no hook name (docs/hooks.md)")
    return name


def _site(name: str) -> str:
    if name not in SITES:
        raise ValueError(f"it holds a mask of {name!r}, which is no attention site")
    return name


def _lengths(site: str, tokens: list[str], target_tokens: list[str]) -> tuple[int, int]:
    """(queries, keys) of a site's mask, as the Trace labels its rows and columns (`Trace.query_tokens`)."""
    queries = len(target_tokens) if site.startswith("decoder.") and target_tokens else len(tokens)
    return queries, len(tokens) if site == "decoder.cross_attn" else queries


def _facts(record: dict[str, Any]) -> ModelFacts:
    """ModelFacts from its JSON, each field of its type."""
    if not _REQUIRED_FACTS <= set(record) <= set(_FACT_TYPES):
        raise ValueError("its model facts are not the fields a trace writes")
    kinds = {"str": str, "int": int, "dict[str, Any]": dict, "list[int]": list, "list[str]": list}
    items = {"list[int]": int, "list[str]": str}  # what a list's elements are
    for name, value in record.items():
        kind, item = kinds[_FACT_TYPES[name]], items.get(_FACT_TYPES[name])
        if not isinstance(value, kind) or isinstance(value, bool) or \
                (item and not all(isinstance(v, item) and not isinstance(v, bool) for v in value)):
            raise ValueError(f"its model fact {name} is not a {kind.__name__}")
    if record["kind"] not in ("encoder", "decoder", "encoder-decoder") or record["n_heads"] < 1 or \
            min(record["n_encoder_layers"], record["n_decoder_layers"]) < 0:
        raise ValueError("its model facts describe no model this app knows")
    return ModelFacts(**record)


def _options(record: dict[str, Any]) -> RunOptions:
    """RunOptions from its JSON, each field of its type."""
    try:
        options = RunOptions.from_record(record)
        pairs = [*options.blocked, *options.ablated]
        fits = (all(isinstance(h, str) for h in options.hooks) and options.causal in ("auto", "on", "off")
                and isinstance(options.pad_to, int) and options.ablation in ABLATION_MODES
                and isinstance(options.summarised, bool) and all(len(pair) == 2 for pair in pairs)
                and all(isinstance(q, int) and isinstance(k, int) for q, k in options.blocked)
                and all(isinstance(site, str) for site, _ in options.ablated))
    except (KeyError, TypeError, ValueError):
        fits = False
    if not fits:
        raise ValueError("its run options are not the fields a trace writes")
    return options


def _sources(parts: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> dict[str, PatternSource]:
    """Each kept pattern's source (`source:<hook name>:<part>`), its parts of matching shapes."""
    by_name: dict[str, dict[str, np.ndarray]] = {}
    for key, value in parts.items():
        name, part = key.rsplit(":", 1) if ":" in key else (key, "")
        if part not in SOURCE_PARTS or not _hook(name).endswith(PATTERN_SUFFIX):
            raise ValueError(f"it holds source:{key}, which is no part of a pattern's source")
        by_name.setdefault(name, {})[part] = value
    sources = {}
    for name, p in by_name.items():
        if not {"query", "key", "scale"} <= set(p):
            raise ValueError(f"its pattern source of {name} lacks its query, key or scale")
        query, key = (_kept(name, part, p) for part in ("query", "key"))
        heads, q_len, _ = query.shape
        allowed = _array(f"{name} mask", p["allowed"], np.bool_, 2) if "allowed" in p else \
            masks.get(Site.of_pattern(name)[0].name)
        bias = _array(f"{name} bias", p["bias"], "f", 3) if "bias" in p else None
        sinks = _array(f"{name} sinks", p["sinks"], "f", 1).astype(np.float32) if "sinks" in p else None
        if (key.dtype != query.dtype or key.shape[0] < 1 or heads % key.shape[0] or key.shape[2] != query.shape[2]
                or allowed is None or allowed.shape != (q_len, key.shape[1])
                or (bias is not None and bias.shape != (heads, q_len, key.shape[1]))
                or (sinks is not None and sinks.shape != (heads,))):
            raise ValueError(f"its pattern source of {name} has parts of shapes that do not match")
        sources[name] = PatternSource(query=query, key=key, scale=_float(name, p["scale"]), allowed=allowed,
                                      bias=bias, softcap=_float(name, p["softcap"]) if "softcap" in p else None,
                                      sinks=sinks)
    return sources


def _kept(name: str, part: str, parts: dict[str, np.ndarray]) -> np.ndarray | RowScaled:
    """A source's query or key: float32, 16 bits (bfloat16 as uint16), or int16 steps with their `<part>_scale` (one
    float32 a row: RowScaled)."""
    if f"{part}_scale" not in parts:
        return _array(f"{name} {part}", parts[part], "fu", 3)
    steps = _array(f"{name} {part}", parts[part], np.int16, 3)
    scales = _array(f"{name} {part} scale", parts[f"{part}_scale"], np.float32, 3)
    if scales.shape != (*steps.shape[:2], 1):
        raise ValueError(f"its pattern source of {name} has a {part} scale of shape {scales.shape}, not one a row")
    return RowScaled(steps, scales)


def _float(name: str, value: np.ndarray) -> float:
    return float(_array(f"{name} scale", value, "f", 0))


def _outputs(arrays: dict[str, np.ndarray]) -> Outputs:
    """The outputs a trace writes (`Outputs`): tokens as strings, the rest numbers."""
    known = typing.get_type_hints(Outputs)
    for key, value in arrays.items():
        if key not in known:
            raise ValueError(f"it holds output:{key}, which is no output a trace writes")
        _array(f"output {key}", value, "U" if key.endswith("_tokens") else "biuf", 2 if key in (
            "log_probs", "token_similarity") else 1)
    return typing.cast(Outputs, arrays)


def _steps(arrays: dict[str, np.ndarray], step_ids: list[int]) -> list[DecodeStep]:
    """The decoding steps: `step:<i>:<pattern hook>` rows, (heads, k_len), for i below the number of steps."""
    rows: list[dict[str, np.ndarray]] = [{} for _ in step_ids]
    for key, value in arrays.items():
        index, _, name = key.partition(":")
        if not index.isdigit() or int(index) >= len(rows) or not _hook(name).endswith(PATTERN_SUFFIX):
            raise ValueError(f"it holds step:{key}, which is no decoding step's attention")
        rows[int(index)][name] = _array(f"step {key}", value, "f", 2)
    return [DecodeStep(token_id, attention) for token_id, attention in zip(step_ids, rows, strict=True)]
