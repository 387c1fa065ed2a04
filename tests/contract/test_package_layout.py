"""One package an editor can follow: the repository's model/, ui/, viz/ and app_pages/ are attention_atlas's
subpackages, reached through links in attention_atlas/ (what pyright and an editor read) and through pyproject's
package-dir (what the wheel and the editable install use); the folders are never a second module tree of their own."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.contract.test_layers import INSIDE, INSTALLED, PACKAGES, ROOT


def imported_names(file: Path) -> set[str]:
    """Every module a file imports from the package (`from attention_atlas.x import y` also names x.y: a module or a
    name in x)."""
    names = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name == INSTALLED or name.startswith(INSTALLED + ".")}


def found_by_path(name: str) -> bool:
    """Whether a static tool finds the module from the repository root by its dotted name alone."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@pytest.mark.parametrize("folder", INSIDE)
def test_each_subpackage_is_a_link_in_the_package_and_mapped_for_the_wheel(folder: str) -> None:
    link = ROOT / INSTALLED / folder
    assert link.is_symlink() and link.resolve() == ROOT / folder
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert package_dir[f"{INSTALLED}.{folder}"] == folder


def test_every_import_of_the_package_is_found_by_its_path() -> None:
    files = [file for package in PACKAGES if package != INSTALLED for file in (ROOT / package).rglob("*.py")]
    files += [*(ROOT / INSTALLED).rglob("*.py"), ROOT / "app.py"]
    lost = {f"{file.relative_to(ROOT)}: {name}" for file in files for name in imported_names(file)
            if not found_by_path(name) and not found_by_path(name.rpartition(".")[0])}
    assert not lost


@pytest.mark.parametrize("folder", INSIDE)
def test_a_folder_imported_by_its_own_name_says_which_name_to_use(folder: str) -> None:
    run = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1
    assert f"ImportError: {folder}/ is the package {INSTALLED}.{folder}: import it by that name" in run.stderr
