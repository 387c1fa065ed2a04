"""Where the app keeps what it makes once per machine: SmolLM2's converted copy, the compiled CPU kernel."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$ATTENTION_ATLAS_CACHE, else $XDG_CACHE_HOME/attention-atlas, else ~/.cache/attention-atlas."""
    if own := os.environ.get("ATTENTION_ATLAS_CACHE"):
        return Path(own).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "attention-atlas"
    return Path.home() / ".cache" / "attention-atlas"
