"""The README and docs/ say what the code is: every picture named exists and is made by `make screenshots`, every
code name cited exists, every link reaches its page and heading, the hook tables are the vocabulary's, the trace
file's keys are the ones documented, and the docs stay reference-sized (what is true now; history stays in git)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.hook_names import PER_BLOCK, PER_LAYER, PER_STACK, in_vocabulary
from attention_atlas.model.registry import load_runner
from tests.contract.test_layers import defined_at_top
from tests.tiny_hf import build

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
PAGE_MOST_BYTES = 25_000  # a page of docs/ at most
DOCS_MOST_BYTES = 120_000  # all of docs/*.md at most
INSIDE = ("model", "ui", "viz", "app_pages")  # installed as attention_atlas.<folder>
PACKAGES = (*INSIDE, "bench", "attention_atlas", "app_browser", "tests", "scripts")
COMMANDS = {  # how a command is written in the docs -> the file that declares its flags (longest prefix first)
    "attention-atlas trace ": "attention_atlas/trace_command.py",
    "attention-atlas train ": "model/toy/train.py",
    "attention-atlas attribute ": "attention_atlas/attribute_command.py",
    "attention-atlas circuit ": "attention_atlas/circuit_command.py",
    "attention-atlas explain ": "attention_atlas/explain_command.py",
    "python -m attention_atlas trace ": "attention_atlas/trace_command.py",
    "python -m attention_atlas train ": "model/toy/train.py",
    "attention-atlas ": "attention_atlas/cli.py",
    "python -m attention_atlas ": "attention_atlas/cli.py",
}
EXTERNAL = {"st", "torch", "np", "numpy", "pd", "transformers", "nn", "F", "os", "json", "tomllib"}  # others' modules
PLACEHOLDER = re.compile(r"[<>{}*…]|\bNAME\b|\bFOLDER\b|\bDIR\b")


def test_the_readme_is_short_and_shows_the_app() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024
    pictures = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert len(pictures) >= 3
    screenshots = _screenshot_names()
    for picture in pictures:
        assert (ROOT / picture).is_file(), f"{picture} is missing: run make screenshots"
        assert Path(picture).parent == Path("docs/images") and Path(picture).stem in screenshots, picture


def test_docs_hold_the_references_and_no_work_log() -> None:
    log = re.compile(r"\b(stop|issue) \d+\b|that day|\bstop \d", re.IGNORECASE)
    for page in PAGES:
        assert page.is_file(), page
        assert not log.findall(page.read_text()), (page.name, log.findall(page.read_text()))
        for link in re.findall(r"\]\(([^)#:]+\.md)\)", page.read_text()):  # relative links between them
            assert (page.parent / link).is_file(), (page.name, link)


def test_every_link_reaches_its_heading() -> None:
    """`[its keys](hooks.md#the-files-keys)` and `[On a GPU](#on-a-gpu)`: the page has a heading of that anchor."""
    assert _anchor("### Figures: `attention_atlas.plot`") == "figures-attention_atlasplot"
    assert _anchor("### The file's keys") == "the-files-keys"
    broken = []
    for page in PAGES:
        for link, anchor in re.findall(r"\]\(([^)#:\s]*)#([^)\s]+)\)", page.read_text()):
            target = page.parent / link if link else page
            if not target.is_file() or anchor not in {_anchor(h) for h in re.findall(r"^#+ .+$", target.read_text(),
                                                                                    re.MULTILINE)}:
                broken.append(f"{page.name}: {link}#{anchor}")
    assert not broken, broken


def test_the_docs_stay_reference_sized() -> None:
    """Each page of docs/ at most 25 KB and all of them 120 KB: one current table per measure, no history."""
    sizes = {page.name: len(page.read_bytes()) for page in DOCS.glob("*.md")}
    assert not {name: size for name, size in sizes.items() if size > PAGE_MOST_BYTES}, sizes
    assert sum(sizes.values()) <= DOCS_MOST_BYTES, sizes


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_name_cited_exists(page: Path) -> None:
    text = page.read_text()
    spans = set(re.findall(r"`([^`\n]+)`", text))
    commands = r"^\s*(?:\.venv/bin/)?(python -m [^\n#]+|attention-atlas[^\n#]*|make \w+)"  # in code blocks
    spans |= set(re.findall(commands, text, re.MULTILINE))
    missing = [span for span in sorted(spans) if not _exists(span.strip())]
    assert not missing, f"{page.name} cites what the code does not have: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_import_in_an_example_is_the_one_path_to_its_name(page: Path) -> None:
    """`from model.core.options import RunOptions` in a code example: the module defines the name (not a module that
    happens to import it), so an example keeps working and teaches the one import path."""
    wrong = []
    imports = re.findall(r"^from (attention_atlas[\w.]*) import ([\w, ]+)$", page.read_text(), re.MULTILINE)
    for module, names in imports:
        file = _file_of(module)
        file = file / "__init__.py" if file.is_dir() else file.with_suffix(".py")
        wrong += [f"from {module} import {name}" for name in map(str.strip, names.split(","))
                  if not file.is_file() or name not in defined_at_top(file)]
    assert not wrong, wrong


def test_a_commands_flags_are_held_to_its_own_parser() -> None:
    """`attention-atlas trace --text` is the trace command's flag, not the serving command's: the longest prefix
    decides which file's flags a cited command line is held to."""
    assert _exists("attention-atlas trace --model x --text y --device-map auto --out t.npz")
    assert _exists("attention-atlas train --task induction --steps 2") and _exists("attention-atlas --trace t.npz")
    assert _exists("python -m attention_atlas trace --list") and _exists("python -m attention_atlas --port 8600")
    for wrong in ("attention-atlas --text y", "attention-atlas trace --trace t.npz", "attention-atlas train --text y",
                  "python -m attention_atlas --list", "attention-atlas trace --model x --no-such-flag"):
        assert not _exists(wrong), wrong


def test_the_hook_tables_are_the_vocabulary() -> None:
    text = (DOCS / "hooks.md").read_text()
    for name, meaning in {**PER_LAYER, **PER_STACK}.items():
        assert f"| `{name}` | {meaning} |" in text, name
    for name, meaning in PER_BLOCK.items():
        assert f"| `{name}` | {meaning} |" in text.split("(after `decoder.blocks.{b}.`)")[1], name


def test_a_trace_files_keys_are_the_documented_ones(tmp_path: Path) -> None:
    documented = _documented_keys()
    files = []
    runs = [  # generated steps, a given target's forced_* outputs, kept sources (and T5's bias), dense patterns
        (load_runner("toy-reverse").run("hello"), False),
        (load_runner("toy-date").run("may 1 2000", "2000-05-01"), False),
        (load_runner(str(build("t5", tmp_path / "t5"))).run("the quick fox"), False),
        (load_runner(str(build("llama", tmp_path / "llama"))).run("the quick fox", options=RunOptions(hooks=("*",))),
         True),
    ]
    for i, (trace, dense) in enumerate(runs):
        trace.save(tmp_path / f"{i}.npz", dense=dense)
        with np.load(tmp_path / f"{i}.npz") as data:
            files.append(data.files)
    keys = [key for names in files for key in names]
    undocumented = [key for key in keys if not any(pattern.fullmatch(key) for pattern in documented.values())]
    assert not undocumented, undocumented
    unseen = [doc for doc, pattern in documented.items() if not any(pattern.fullmatch(key) for key in keys)]
    assert not unseen, f"documented keys no file holds: {unseen}"


def _documented_keys() -> dict[str, re.Pattern]:
    """The key column of the table under "The file's keys" in docs/hooks.md, as patterns (`<…>` is any text; a
    `<hook name>` is a name of the vocabulary)."""
    section = (DOCS / "hooks.md").read_text().split("### The file's keys", 1)[1].split("\n#", 1)[0]
    keys = re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
    assert keys, "no table of keys in docs/hooks.md"
    hook = r"(?:encoder|decoder)\.[\w.]+"
    return {key: re.compile(re.sub(r"<[^>]+>", lambda m: hook if "hook" in m.group() else r"[^:]+",
                                   re.escape(key).replace(r"\<", "<").replace(r"\>", ">"))) for key in keys}


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: its words in lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def _screenshot_names() -> set[str]:
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return set(module.SHOTS)


@cache
def _defined_names() -> frozenset[str]:
    """Every function, class, class attribute or field, instance attribute and module constant the project's Python
    defines (not its arguments and local variables)."""
    names: set[str] = set()
    for file in ROOT.glob("**/*.py"):
        if ".venv" in file.parts or "build" in file.parts:
            continue
        tree = ast.parse(file.read_text())
        scopes = [tree, *(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))]
        for scope in scopes:  # module and class bodies: constants, fields, attributes
            for node in scope.body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, ast.AnnAssign) else []
                names.update(target.id for target in targets if isinstance(target, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return frozenset(names)


@cache
def _project_text() -> str:
    files = [f for f in ROOT.glob("**/*") if f.suffix in {".py", ".c", ".toml", ".sh"} or f.name == "Makefile"]
    return "\n".join(f.read_text() for f in files if f.is_file() and ".venv" not in f.parts)


def _flags(file: str) -> set[str]:
    return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", (ROOT / file).read_text()))


def _exists(span: str) -> bool:
    """Whether a backticked span names something the project has; spans that name nothing of it are taken as is."""
    if PLACEHOLDER.search(span) and not span.startswith(("python -m", "attention-atlas", "make ")):
        return True  # a pattern, not a name
    if span.startswith("make "):
        return re.search(rf"^{re.escape(span.split()[1])}:", (ROOT / "Makefile").read_text(), re.MULTILINE) is not None
    command = next((c for c in sorted(COMMANDS, key=len, reverse=True) if (span + " ").startswith(c)), None)
    if command is not None:
        return set(re.findall(r"(?<!\S)--[\w-]+", span)) <= _flags(COMMANDS[command])
    if span.startswith("python -m "):
        return importlib.util.find_spec(span.split()[2]) is not None
    if span.startswith("--") and re.fullmatch(r"--[\w-]+", span):
        return any(span in _flags(file) for file in COMMANDS.values())
    if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", span):  # an environment variable or a constant
        return span in _project_text()
    if re.fullmatch(r"[\w./-]+\.(py|c|md|toml|json|sh|txt|webp|png)|[\w.-]+(/[\w.-]+)+/?", span) and \
            not span.startswith(("/", "~")):
        return (ROOT / span).exists()
    if re.fullmatch(r"(encoder|decoder)\.[\w.]+", span):
        return in_vocabulary(span) or span.split(".", 1)[1] in {"attn", "cross_attn"}
    dotted = re.fullmatch(r"([A-Za-z_][\w.]*)(\(.*\))?", span)
    if dotted is None:
        return True
    parts = dotted.group(1).split(".")
    if parts[0] in PACKAGES and len(parts) > 1:
        return _importable(dotted.group(1))
    if parts[0] in _defined_names() and parts[0][0].isupper():  # a class of the project: its members too
        return all(part in _defined_names() for part in parts[1:])
    if dotted.group(2) and len(parts) == 2 and parts[0] not in EXTERNAL:  # trace.pattern(…): the method
        return parts[1] in _defined_names()
    if dotted.group(2) and len(parts) == 1:  # a function of the project, or a builtin
        return parts[0] in _defined_names() or parts[0] in dir(__builtins__)
    return True


def _file_of(module: str) -> Path:
    """The repository's file (or package folder's __init__.py) of an installed module name."""
    parts = module.split(".")
    folder = ROOT / Path(*parts[1:]) if len(parts) > 1 and parts[1] in INSIDE else ROOT / Path(*parts)
    return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")


def _importable(name: str) -> bool:
    """`model.core.trace.load_trace`: the longest module prefix imports and holds the rest (a dataclass field too)."""
    parts = name.split(".")
    if parts[0] in INSIDE:  # docs name the app's modules by their folders: model.core.… is attention_atlas.model.core.…
        parts = ["attention_atlas", *parts]
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            fields = getattr(value, "__dataclass_fields__", {})
            if part in fields:
                return True
            if not hasattr(value, part):
                return False
            value = getattr(value, part)
        return True
    return (ROOT / Path(*parts)).with_suffix(".py").exists()
