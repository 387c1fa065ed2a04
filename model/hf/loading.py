"""Loading a Hugging Face model safely from a local folder or a hub id, with eager attention
(model/hf/heads.py's ATTENTION: eager that can also report the per-head values); a family that computes attention in
its own code is loaded with transformers' eager attention and routed through the same (model/hf/own_attention.py).

Safety: weights must be safetensors (pickle checkpoints can run code when loaded, so folders that
only have .bin/.pt files are refused), and `trust_remote_code` is never set. A hub id that is not
in the local cache fails at once when the hub cannot be reached, with a message saying what to do.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families import Kind, adapter_of, family_of, kind_of
from attention_atlas.model.hf.heads import ATTENTION, register_attention
from attention_atlas.model.hf.placement import Placement, budgets_text, is_spread, placement_words, serialise
from attention_atlas.model.hf.proof import prove_attention
from attention_atlas.model.hf.runner import HFRunner

HUB_HOST = ("huggingface.co", 443)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_ID = re.compile(r"[\w.-]{1,96}(/[\w.-]{1,96})?", re.ASCII)
SHOWN_CHARS = 200  # of a typed folder or id, in messages
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/'\"]+/)*[^\s/'\"]*")  # in a library's message


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether the Hugging Face Hub answers (False at once under HF_HUB_OFFLINE=1)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def shown(source: str) -> str:
    """A typed folder or id as messages quote it: as typed (never expanded: `~` stays `~`), and not too long."""
    return source if len(source) <= SHOWN_CHARS else source[:SHOWN_CHARS] + "…"


def local_folder(source: str) -> Path | None:
    """The existing path that `source` names (None: it is not one, so it may be a hub id). ValueError for a name
    that is neither (too long for a path, and no hub id either)."""
    try:
        folder = Path(source).expanduser()
        return folder if folder.exists() else None
    except (OSError, RuntimeError, ValueError):  # name too long, a user `~name` that does not exist, a NUL
        raise UserError(f"{shown(source)!r} is neither a folder here nor a Hugging Face hub id.") from None


def check_hub_id(source: str) -> None:
    """ValueError unless `source` has the form of a hub id (`name` or `owner/name`)."""
    if source.startswith(("/", ".", "~")):
        raise UserError(f"{shown(source)} does not exist here: give a Hugging Face model folder on this server, "
                         "or a hub id.")
    if not HUB_ID.fullmatch(source):
        raise UserError(f"{shown(source)!r} is neither a folder here nor a Hugging Face hub id (owner/name: "
                         "letters, digits, '-', '_' and '.', up to 96 characters each).")


def read_config(folder: Path, source: str) -> dict[str, Any]:
    """The folder's config.json as a dict; ValueError saying what is wrong with it otherwise."""
    config = folder / "config.json"
    if not config.is_file():
        raise UserError(f"{shown(source)} has no config.json, so it is not a Hugging Face model folder")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"{shown(source)}/config.json cannot be read ({error.strerror}).") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8 text"
        raise UserError(f"{shown(source)}/config.json is not valid JSON ({reason}).") from None
    if not isinstance(data, dict):
        raise UserError(f"{shown(source)}/config.json does not hold a JSON object of settings.")
    return data


def check_local_folder(folder: Path, source: str | None = None) -> None:
    """ValueError unless `folder` looks like a Hugging Face model folder of a supported family with safetensors
    weights. source: the folder as the person typed it (messages quote that)."""
    source = str(folder) if source is None else source
    if not folder.is_dir():
        raise UserError(f"{shown(source)} is not a folder: give a Hugging Face model folder or a hub id")
    config = read_config(folder, source)
    if "transformers_weights" in config:
        raise UserError(f"{shown(source)}/config.json points at its own weights file ('transformers_weights'); "
                         "refused for safety")
    kind_of(str(config.get("model_type")))  # a clear message for a type this app cannot show
    if not any(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        found = f" (found {', '.join(pickles)})" if pickles else ""
        raise UserError(
            f"{shown(source)} has no .safetensors weights{found}. Pickle checkpoints are refused because loading "
            "one can run arbitrary code; convert it to safetensors first (save_pretrained(..., "
            "safe_serialization=True))."
        )


def _model_class(kind: Kind) -> Any:
    import transformers

    return {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[kind]


def load_hf_runner(
    source: str,
    model_id: str | None = None,
    device: torch.device | str = "cpu",
    load_kwargs: dict[str, Any] | None = None,
    origin: str | None = None,
    precision: torch.dtype = torch.float32,
    placement: Placement | None = None,
) -> HFRunner:
    """Load the model at `source` (a folder, or a hub id) on `device` in `precision` and wrap it in an HFRunner
    (its CPU copy, for runs a GPU cannot hold, is float32); or, given a `placement`, spread over the devices
    accelerate finds (model/hf/placement.py; `device` unused, no CPU copy). origin: where it comes from, as the
    model card says it (default: "a local folder" or the hub id)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    register_attention()
    folder = local_folder(source)
    local = folder is not None
    if folder is not None:
        check_local_folder(folder, source)
    else:
        check_hub_id(source)
    common: dict[str, Any] = {"trust_remote_code": False, "local_files_only": local or not hub_reachable()}
    common |= load_kwargs or {}
    where = str(folder) if folder is not None else source
    start = time.perf_counter()
    try:
        config = transformers.AutoConfig.from_pretrained(where, **common)
        kind = kind_of(config.model_type)

        adapter = adapter_of(config.model_type)
        implementation = "eager" if adapter.own_attention else ATTENTION  # own code: routed once loaded

        def load_model(on: torch.device | str | Placement, dtype: torch.dtype = torch.float32) -> nn.Module:
            spread = on.load_kwargs() if isinstance(on, Placement) else {}
            model = _model_class(kind).from_pretrained(
                where, attn_implementation=implementation, use_safetensors=True, dtype=dtype, **common, **spread
            )
            adapter.prepare(model)
            model.requires_grad_(False)  # shared, never trained: a gradient pass (patching's attribution) builds its
            # graph from the activations it asks about, not through every weight
            return model.eval() if spread else model.to(on).eval()

        try:
            model = load_model(placement or device, precision)
        except KeyError as error:  # transformers looked the implementation up in a table of its own
            if error.args != (ATTENTION,):
                raise
            raise UserError(f"{config.model_type} computes attention in its own code, not through transformers' "
                             "attention interface, so its attention cannot be read here yet.") from error
        family = family_of(model, config, kind)
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **common)
    except OSError as error:
        raise UserError(_explain_load_failure(source, folder, common["local_files_only"], error)) from error
    origin = origin or ("a local folder" if local else f"the Hugging Face Hub ({source})")
    notes = {"comes from": origin, "load time": f"{time.perf_counter() - start:.1f} s"}
    if placement is None:
        runner = HFRunner(model_id or source, model, tokenizer, family, notes, cpu_loader=lambda: load_model("cpu"))
    else:
        if is_spread(model):
            serialise(model)
            notes["where the layers are"] = placement_words(model.hf_device_map)
        if placement.max_memory:
            notes["memory budgets"] = budgets_text(placement.max_memory)
        runner = HFRunner(model_id or source, model, tokenizer, family, notes)
    prove_attention(runner)  # before any session shares it: never a map that differs from the model's own
    return runner


def _explain_load_failure(source: str, folder: Path | None, offline: bool, error: OSError) -> str:
    if folder is not None:
        return f"could not load the model folder {shown(source)}: {_without_paths(str(error), folder, source)}"
    if offline:
        return (
            f"{source!r} is not in the local Hugging Face cache and the Hub cannot be reached from here. "
            f"Download it where there is internet (huggingface-cli download {source}) and give its folder instead."
        )
    return f"could not load {source!r} from the Hugging Face Hub: {_without_paths(str(error), None, source)}"


def _without_paths(message: str, folder: Path | None, source: str) -> str:
    """A library's error message as a person may see it: its first line, the folder as they typed it, and no
    other path of the server (its home, caches or site-packages)."""
    first = message.strip().splitlines()[0] if message.strip() else "no reason given"
    if folder is not None:
        first = first.replace(str(folder), "\0")
    return ABSOLUTE_PATH.sub("…", first).replace("\0", shown(source))[:500]
