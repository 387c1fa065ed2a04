"""The layers' contract: what each part of the code may import, and no import cycle. Every import counts: at the top,
inside a function, and those made only for type checking."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = "attention_atlas"  # the one installed package: its own folder, and the repository's model/, ui/ …
INSIDE = ("model", "ui", "viz", "app_pages")  # folders of the repository installed as attention_atlas.<folder>
OUTSIDE = ("bench", "app_browser", "tests", "scripts")  # the repository's own, never installed
PACKAGES = (INSTALLED, *INSIDE, *OUTSIDE)  # folders of the repository that hold modules
A = INSTALLED + "."
FORBIDDEN = {  # importer (a module or package) -> what it must never import
    A + "viz": (A + "model", A + "ui", "streamlit", A + "app_pages"),
    A + "model": (A + "ui", A + "viz", "streamlit", A + "app_pages"),
    A + "model.core": (A + "model.hf", A + "model.toy", A + "model.scratch", A + "model.inspect", A + "model.registry"),
    A + "plot": (A + "ui", "streamlit", A + "app_pages"),
    A + "api": (A + "ui", A + "viz", "streamlit", A + "app_pages"),
    "bench": ("tests",),
    "app_browser": ("tests",),
    "scripts": ("tests",),
}


def module_name(file: Path) -> str:
    """The dotted name a module is imported by: `attention_atlas.model.core.runner` for model/core/runner.py."""
    parts = file.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    if parts == ("app",) or parts[0] in INSIDE:  # the frame is attention_atlas/app.py once installed
        parts = (INSTALLED, *parts)
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the project by its dotted name."""
    files = [ROOT / "app.py", *(f for package in PACKAGES for f in (ROOT / package).glob("**/*.py")
                                if not f.is_symlink())]
    return {module_name(file): file for file in files}


@cache
def parsed(file: Path) -> ast.Module:
    """A file's syntax tree, read once for every test."""
    return ast.parse(file.read_text())


def imports_of(file: Path) -> Iterator[str]:
    """The modules a file imports (a `from package import module` names the module), wherever the import is."""
    package = module_name(file) if file.name == "__init__.py" else module_name(file).rpartition(".")[0]
    for node in ast.walk(parsed(file)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *filter(None, [base])])
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@cache
def graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports."""
    return {name: {target for target in imports_of(file) if target in modules() and target != name}
            for name, file in modules().items()}


def violations(edges: dict[str, set[str]], external: dict[str, list[str]]) -> list[str]:
    """'importer -> imported' for every import the contract forbids."""
    found = []
    for importer in sorted(set(edges) | set(external)):
        for layer, banned in FORBIDDEN.items():
            if not within(importer, layer):
                continue
            for target in sorted(edges.get(importer, set()) | set(external.get(importer, []))):
                if any(within(target, b) for b in banned):
                    found.append(f"{importer} -> {target}")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@cache
def external_imports() -> dict[str, list[str]]:
    """Project module -> the imports of other packages (streamlit …) it makes (shared: copy before changing)."""
    return {name: [target for target in imports_of(file) if target.split(".")[0] not in (INSTALLED, *OUTSIDE)]
            for name, file in modules().items()}


def test_each_layer_imports_only_what_it_may() -> None:
    assert violations(graph(), external_imports()) == []


def test_there_is_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_nothing_imports_the_folders_by_their_own_names() -> None:
    """`import model` would find a person's own model.py (or nothing, once installed): every import of the app's
    code goes through attention_atlas."""
    bare = [f"{name} -> {target}" for name, targets in external_imports().items() for target in targets
            if target.split(".")[0] in (*INSIDE, "pages", "app")]
    assert bare == []


@pytest.mark.parametrize(("importer", "imported"), [
    (A + "viz.heatmap", A + "model.core.trace"), (A + "viz.heatmap", "streamlit"),
    (A + "model.core.masks", A + "model.hf.runner"), (A + "model.toy.runner", A + "ui.page"),
    ("bench.capture", "tests.browser"), (A + "plot", "streamlit"),
])
def test_the_contract_catches_a_forbidden_import(importer: str, imported: str) -> None:
    edges = {name: set(targets) for name, targets in graph().items()}
    external = dict(external_imports())
    if imported in modules():
        edges[importer].add(imported)
    else:
        external[importer] = [*external[importer], imported]
    assert violations(edges, external) == [f"{importer} -> {imported}"]


def test_the_contract_catches_a_cycle() -> None:
    edges = {name: set(targets) for name, targets in graph().items()}
    options, runner = A + "model.core.options", A + "model.core.runner"
    edges[options].add(runner)  # the runner imports the options
    assert any({options, runner} <= set(component) for component in cycles(edges))


def defined_at_top(file: Path) -> set[str]:
    """The names a module itself defines at its top level (not those it imports), and those its `__all__` lists (the
    public names attention_atlas/__init__.py exports from where they are defined)."""
    names: set[str] = set()
    for node in parsed(file).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names.update(ast.literal_eval(node.value))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_name_is_imported_from_where_it_is_defined() -> None:
    """One import path per name: `from attention_atlas.model.core.trace.trace import Site` would work (trace.py
    imports Site), but Site lives in model/core/trace/sites.py, and that is the only place to import it from."""
    second_paths = []
    for name, file in modules().items():
        for node in ast.walk(parsed(file)):
            if not (isinstance(node, ast.ImportFrom) and node.module in modules() and not node.level):
                continue
            defined = defined_at_top(modules()[node.module])
            second_paths += [f"{name}: from {node.module} import {alias.name}" for alias in node.names
                             if alias.name not in defined and f"{node.module}.{alias.name}" not in modules()]
    assert second_paths == []
