"""The hostile corpus (tests/data/hostile.json) and the checks every hostile test makes on what a person sees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = json.loads((ROOT / "tests" / "data" / "hostile.json").read_text())
SERVER_DETAILS = ("Traceback", 'File "/', str(ROOT), "site-packages", sys.prefix)  # never on the page
SHOWN = ("title", "subheader", "markdown", "caption", "code", "error", "warning", "info", "success", "exception")


def value(entry: str | dict) -> str:
    """A corpus entry: a string, or {"repeat": s, "times": n} for long ones."""
    return entry["repeat"] * entry["times"] if isinstance(entry, dict) else entry


def shown_text(at: AppTest) -> str:
    """Every message and piece of text on the page and in the sidebar, as rendered."""
    return "\n".join(str(element.value) for kind in SHOWN for element in getattr(at, kind))


def assert_safe(at: AppTest) -> None:
    """No exception, and no traceback or server path in what the page shows."""
    assert not at.exception, [e.value for e in at.exception]
    text = shown_text(at)
    leaked = [detail for detail in SERVER_DETAILS if detail in text]
    assert not leaked, (leaked, text[:2000])


def make_folders(root: Path) -> dict[str, Path]:
    """The corpus's broken model folders, written under `root`."""
    folders = {}
    for name, files in CORPUS["model_folders"].items():
        folder = root / name
        folder.mkdir(parents=True)
        for file_name, content in files.items():
            (folder / file_name).write_text(content)
        folders[name] = folder
    return folders
