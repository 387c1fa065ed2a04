"""What the result commands (`attention-atlas attribute`, `explain`, `circuit`) end with: a summary printed as JSON,
and every field written to --out, both strict JSON (no Infinity or NaN: a run that overflowed its precision is said in
a sentence, and nothing is written)."""

from __future__ import annotations

import json
import sys
from typing import Any


def print_and_write(summary: dict[str, Any], every: dict[str, Any], out: str | None) -> int:
    """Print `summary`, write `every` to `out` (if given); the command's exit status (2: a number not finite)."""
    try:
        printed, written = (json.dumps(value, ensure_ascii=False, allow_nan=False) for value in (summary, every))
    except ValueError:
        print("error: a number of the result is not finite (Infinity or NaN: a run that overflowed its precision), "
              "so no JSON was written. Try --precision float32.", file=sys.stderr)
        return 2
    if out:
        with open(out, "w", encoding="utf-8") as file:
            file.write(written)
    print(printed)
    return 0
