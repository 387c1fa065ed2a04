"""Loading a Hugging Face model safely from a local folder or a hub id, with eager attention
(model/hf/heads.py's ATTENTION: eager that can also report the per-head values).

Safety: weights must be safetensors (pickle checkpoints can run code when loaded, so folders that
only have .bin/.pt files are refused), and `trust_remote_code` is never set. A hub id that is not
in the local cache fails at once when the hub cannot be reached, with a message saying what to do.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model.hf.heads import ATTENTION, register_attention
from model.hf.runner import HFRunner
from model.hf.taps import Family, family_for

HUB_HOST = ("huggingface.co", 443)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether the Hugging Face Hub answers (False at once under HF_HUB_OFFLINE=1)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def check_local_folder(folder: Path) -> None:
    """ValueError unless `folder` looks like a Hugging Face model folder with safetensors weights."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: give a Hugging Face model folder or a hub id")
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"{folder} has no config.json, so it is not a Hugging Face model folder")
    if "transformers_weights" in json.loads(config.read_text()):
        raise ValueError(f"{config} points at its own weights file ('transformers_weights'); refused for safety")
    if not any(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        found = f" (found {', '.join(pickles)})" if pickles else ""
        raise ValueError(
            f"{folder} has no .safetensors weights{found}. Pickle checkpoints are refused because loading one "
            "can run arbitrary code; convert it to safetensors first (save_pretrained(..., safe_serialization=True))."
        )


def _model_class(family: Family) -> Any:
    import transformers

    return {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family.kind]


def load_hf_runner(
    source: str,
    model_id: str | None = None,
    device: torch.device | str = "cpu",
    load_kwargs: dict[str, Any] | None = None,
    origin: str | None = None,
) -> HFRunner:
    """Load the model at `source` (a folder, or a hub id) on `device` and wrap it in an HFRunner.
    origin: where it comes from, as the model card says it (default: "a local folder" or the hub id)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    register_attention()
    folder = Path(source).expanduser()
    local = folder.exists()
    if local:
        check_local_folder(folder)
    common: dict[str, Any] = {"trust_remote_code": False, "local_files_only": local or not hub_reachable()}
    common |= load_kwargs or {}
    where = str(folder) if local else source
    start = time.perf_counter()
    try:
        config = transformers.AutoConfig.from_pretrained(where, **common)
        family = family_for(config.model_type)

        def load_model(on: torch.device | str) -> nn.Module:
            model = _model_class(family).from_pretrained(
                where, attn_implementation=ATTENTION, use_safetensors=True, **common
            )
            return model.to(on).eval()

        model = load_model(device)
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **common)
    except OSError as error:
        raise ValueError(_explain_load_failure(source, local, common["local_files_only"], error)) from error
    origin = origin or ("a local folder" if local else f"the Hugging Face Hub ({source})")
    notes = {"comes from": origin, "load time": f"{time.perf_counter() - start:.1f} s"}
    return HFRunner(model_id or source, model, tokenizer, family, notes, cpu_loader=lambda: load_model("cpu"))


def _explain_load_failure(source: str, local: bool, offline: bool, error: OSError) -> str:
    if local:
        return f"could not load the model folder {source}: {error}"
    if offline:
        return (
            f"{source!r} is not in the local Hugging Face cache and the Hub cannot be reached from here. "
            f"Download it where there is internet (huggingface-cli download {source}) and give its folder instead."
        )
    return f"could not load {source!r} from the Hugging Face Hub: {error}"


