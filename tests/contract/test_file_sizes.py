"""Small modules with one job: no Python file of the project (code, benchmarks, tests) is over MAX_LINES lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
MAX_LINES = 300


def test_no_python_file_is_over_the_limit() -> None:
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    sizes = {name: len((ROOT / name).read_text(encoding="utf-8").splitlines()) for name in tracked
             if (ROOT / name).is_file()}
    assert len(sizes) > 100  # every file of the project was read
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these into modules of one job each: {over}"
