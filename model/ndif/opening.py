"""Opening a model on NDIF: its config and tokenizer read here (from the Hugging Face Hub where it can be reached, or
its cache, or a local folder's), its twin built and probed (model/ndif/twin.py), the model as nnsight addresses it.

Sent to NDIF, the model is a hub id NDIF hosts (asked of NDIF's /status), built here on the meta device: no weights.
Simulated (`simulate=True`), nnsight loads its weights here (a folder, or a hub id in the cache) and every run goes
through the serialisation round trip a real request takes (model/ndif/request.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from attention_atlas.model.core.devices import precision_name
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.facts import SOURCE_BYTES_LIMIT, longest_input, model_facts
from attention_atlas.model.hf.families import kind_of
from attention_atlas.model.hf.loading import check_hub_id, check_local_folder, hub_reachable, local_folder, shown
from attention_atlas.model.ndif.request import NO_KEY, current_key
from attention_atlas.model.ndif.runner import Hosted, NDIFRunner
from attention_atlas.model.ndif.transfer import layer_shapes, wire_bytes
from attention_atlas.model.ndif.twin import build_twin, probe

STATUS_TIMEOUT_S = 10.0


def hosted_models() -> list[str] | None:
    """The hub ids NDIF runs now (its /status), or None where NDIF cannot be reached."""
    import httpx
    from nnsight import CONFIG

    try:
        response = httpx.get(f"{CONFIG.API.HOST}/status", timeout=STATUS_TIMEOUT_S)
        response.raise_for_status()
        deployments = response.json().get("deployments", {})
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return sorted({str(d.get("repo_id", name)) for name, d in deployments.items() if isinstance(d, dict)})


def open_ndif(source: str, simulate: bool = False, progress: Callable[[str], None] | None = None,
              hosted: Callable[[], list[str] | None] = hosted_models) -> NDIFRunner:
    """A runner for `source` on NDIF (simulate: the same requests, run here). UserError with a sentence for a model
    NDIF does not host, one that cannot be read here, or one whose attention this app cannot read on NDIF."""
    tell = progress or (lambda words: None)
    folder = local_folder(source)
    if folder is not None:
        check_local_folder(folder, source)
        if not simulate:
            raise UserError(f"NDIF runs the models it hosts, named by their Hugging Face Hub id; {shown(source)} is "
                            "a folder here. Give the hub id, or simulate the run here (simulate=True, or Device → "
                            "NDIF, simulated).")
    else:
        check_hub_id(source)
    if not simulate:
        if not current_key():
            raise UserError(NO_KEY)
        tell("Asking NDIF which models it hosts…")
        names = hosted()
        if names is None:
            raise UserError("NDIF cannot be reached from this server to say which models it hosts: check the "
                            "network, or simulate the run here (simulate=True, or Device → NDIF, simulated).")
        if source not in names:
            raise UserError(f"NDIF does not host {shown(source)} now. It hosts: {', '.join(names) or 'nothing'}.")
    where = str(folder) if folder is not None else source
    config, tokenizer = _read(where, source, offline=folder is not None or not hub_reachable())
    if kind_of(config.model_type) != "decoder":
        raise UserError(f"{shown(source)} is not a decoder-only language model: on NDIF this app reads those.")
    tell("Building its twin here (its layers, a few dimensions wide) to find its hooks…")
    twin = build_twin(source, config, tokenizer)
    found = probe(twin)
    tell("Loading its weights here to simulate NDIF…" if simulate else "Naming it for NDIF…")
    model = _nnsight_model(where, tokenizer, simulate, _dtype(config))
    module = model._module  # the model's own modules: on the meta device unless simulated
    taps = twin.family.taps(module)
    shapes = layer_shapes(config)[1:]
    hosted_model = Hosted(model, taps, {m: path for path, m in module.named_modules()}, found, shapes, simulate)
    return NDIFRunner(hosted_model, _facts(source, module, twin, config, tokenizer, simulate), twin.family, tokenizer)


def _read(where: str, source: str, offline: bool) -> tuple[Any, Any]:
    """The config and tokenizer of `where`; UserError where they cannot be read here."""
    import transformers

    common = {"trust_remote_code": False, "local_files_only": offline}
    try:
        return (transformers.AutoConfig.from_pretrained(where, **common),
                transformers.AutoTokenizer.from_pretrained(where, **common))
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        hint = " (the Hub cannot be reached from here, and it is not in the local cache)" if offline else ""
        raise UserError(f"The config and tokenizer of {shown(source)} cannot be read here{hint}: {first}") from error


def _nnsight_model(where: str, tokenizer: Any, simulate: bool, dtype: torch.dtype) -> Any:
    """nnsight's TransformersModel of `where`: its weights loaded here (float32, on the CPU) to simulate, else built on
    the meta device in the config's dtype (what NDIF runs it in, and what its queries and keys come back in)."""
    from nnsight import TransformersModel

    if simulate:
        return TransformersModel(where, task="text-generation", tokenizer=tokenizer, dispatch=True,
                                 dtype=torch.float32)
    return TransformersModel(where, task="text-generation", tokenizer=tokenizer, dtype=dtype)


def _facts(source: str, module: Any, twin: Any, config: Any, tokenizer: Any, simulate: bool) -> Any:
    """The model card: the local facts of the model's own layout (its config, on `module`), where it runs."""
    runs = "NDIF, simulated here (nnsight's request round trip, the weights loaded here)" if simulate else \
        "NDIF (National Deep Inference Fabric), through nnsight: the text and the run's requests go there"
    facts = model_facts(source, module, twin.family, {"runs on": runs, "hooks proven on": "its twin, a model of its "
                                                      "class and layers a few dimensions wide, built here"})
    precision = precision_name(torch.float32 if simulate else _dtype(config))
    return replace(facts, device="NDIF (simulated)" if simulate else "NDIF", precision=precision,
                   special_ids=sorted(set(tokenizer.all_special_ids)), max_len=_longest(config, twin.family))


def _longest(config: Any, family: Any) -> int:
    """The most tokens a run on NDIF reads: the model's own limit (at most LONGEST_INPUT, as a local model's), and as
    many as keep one layer's queries and keys, fetched and kept here in float32, within SOURCE_BYTES_LIMIT (the app's
    runs keep a summary made on NDIF, and the layers a view opens: model/ndif/fetched.py)."""
    _, heads, kv_heads, d_head = layer_shapes(config)
    return min(longest_input(config, family, byte_limit=sys.maxsize), SOURCE_BYTES_LIMIT // wire_bytes(
        1, heads, kv_heads, d_head, 1, number_bytes=4))


def _dtype(config: Any) -> torch.dtype:
    """The dtype the config names (float32 where it names none)."""
    named = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    return named if isinstance(named, torch.dtype) else getattr(torch, str(named).removeprefix("torch."))
