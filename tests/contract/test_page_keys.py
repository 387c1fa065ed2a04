"""Each page keeps the choices it declares (`Page.keeps` in ui/page.py): every widget key that holds a value, drawn by a
page's own code or by the ui/ functions it reaches, is declared kept by that page or listed here as not kept, with
why. Read from the code, not from a run, so that every tab and branch counts."""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import pytest

from attention_atlas.ui.page import KEPT_KEYS, PAGES
from tests.contract.test_layers import ROOT, modules

VALUE_WIDGETS = {"selectbox", "radio", "slider", "select_slider", "number_input", "text_input", "text_area", "toggle",
                 "checkbox", "multiselect", "pills", "segmented_control", "date_input", "time_input", "color_picker",
                 "data_editor", "tabs"}  # an uploader's file cannot be written back; a button's click is an event
SELECTIONS = {"plotly_chart", "altair_chart", "vega_lite_chart", "dataframe", "pydeck_chart"}  # hold a value on_select
NOT_KEPT = {  # value widgets' keys deliberately not kept (a glob where the key is built): why
    "view": "the Attention page's tab: the URL holds it",
    "masks_view": "the Masks page's tab: the URL holds it",
    "positions_view": "the Positional encoding page's tab: the URL holds it",
    "activations_view": "the Activations page's tab: the URL holds it",
    "step_view": "the Step through page's tab: the URL holds it",
    "attention_model_view": "a click on a thumbnail: it opens that head, once",
    "attention_layer_heads": "a click on a thumbnail: it opens that head, once",
    "attention_roles": "a click on a head of the roles grid: it opens that head, once",
    "attention_one_head": "a click on a cell: it opens \"Why here?\" on that cell, once",
    "*_why_sides": "a click on a head's bar: it opens that head, once",
    "attention_pooled": "a click on the pooled head: it moves the window there, once",
    "attribution_circuit_graph": "a click on a head of the circuit: it opens that head on the Attention page, once",
    "attention_sink_scale": "opens on the scale that suits the values shown (ui/colour_scale.py)",
    "train_grid": "a click on a thumbnail: it opens that head, once",
    "attribution_*_heads": "a click on a head's share: it opens that head on the Attention page, once",
    "attribution_graph_edges": "a click on an edge of the graph: it opens its head on the Attention page, once",
    "tour_diagram": "a click on a step of the diagram: it opens that step, once",
    "tour_guess": "a guess at this step's question: the next question asks anew",
    "attention_lines_heads": "the heads of this model's layer: another model has others",
    "attention_lines_focus": "a token of this text",
    "activations_traj_tokens": "tokens of this text",
    "activations_lens_positions": "positions of this text",
    "activations_neuron_scale": "opens on the scale that suits the values shown (ui/colour_scale.py)",
    "activations_residual_scale": "opens on the scale that suits the values shown (ui/colour_scale.py)",
    "activations_text_start": "the neurons' window over a long text opens on its last tokens",
    "generate_pick": "a step of this generation, which a visit elsewhere may reset",
    "generate_force_pick": "a token of this step",
    "train_snapshot_*": "the snapshot slider follows the newest snapshot, keyed by its options (ui/training_views.py)",
}


@dataclass(frozen=True)
class Drawn:
    """A value widget's key (a glob where part of it is built at run time), and where it is drawn."""

    key: str
    where: str


def page_module(page_path: str) -> str:
    return "attention_atlas." + page_path.removesuffix(".py").replace("/", ".")


@cache
def tree(module: str) -> ast.Module:
    return ast.parse(modules()[module].read_text())


@cache
def functions(module: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree(module).body if isinstance(node, ast.FunctionDef)}


@cache
def imported(module: str) -> dict[str, tuple[str, str | None]]:
    """Names a module imports from attention_atlas's ui/ and app_pages/: name -> (module, function or None)."""
    names: dict[str, tuple[str, str | None]] = {}
    for node in tree(module).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attention_atlas."):
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = (whole, None) if whole in modules() else (node.module, alias.name)
    return {name: target for name, target in names.items() if target[0].split(".")[1] in ("ui", "app_pages")}


def target(module: str, node: ast.expr) -> tuple[str, str] | None:
    """The function a name or `module.attribute` stands for, where it is one of ui/'s or the page's own."""
    if isinstance(node, ast.Name):
        if node.id in functions(module):
            return module, node.id
        found = imported(module).get(node.id)
        if found and found[1] and found[1] in functions(found[0]):
            return found[0], found[1]
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        found = imported(module).get(node.value.id)
        if found and found[1] is None and node.attr in functions(found[0]):
            return found[0], node.attr
    return None


def pattern(node: ast.expr, bound: dict[str, str], function: ast.FunctionDef) -> str | None:
    """The key an expression gives: a string, an f-string as a glob, or a parameter's or local's value; None where
    it is not known on this path."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "*" for part in node.values)
    if isinstance(node, ast.Name):
        if node.id in bound:
            return bound[node.id]
        assigned = [a.value for a in ast.walk(function) if isinstance(a, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
        return pattern(assigned[0], bound, function) if len(assigned) == 1 else None
    return None


def bindings(call: ast.Call, callee: ast.FunctionDef, bound: dict[str, str],
             caller: ast.FunctionDef) -> dict[str, str]:
    """The callee's parameters that this call gives a known string (or glob)."""
    parameters = [a.arg for a in [*callee.args.posonlyargs, *callee.args.args]]
    given = dict(zip(parameters, call.args, strict=False)) | {k.arg: k.value for k in call.keywords if k.arg}
    return {name: value for name, node in given.items() if (value := pattern(node, bound, caller)) is not None}


def widget_keys(call: ast.Call) -> ast.expr | None:
    """The `key=` of a call that draws a widget holding a value, else None."""
    if not isinstance(call.func, ast.Attribute):
        return None
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    selects = "on_select" in keywords and not (isinstance(keywords["on_select"], ast.Constant)
                                               and keywords["on_select"].value == "ignore")
    if call.func.attr in VALUE_WIDGETS or (call.func.attr in SELECTIONS and selects):
        return keywords.get("key")
    return None


def drawn_from(module: str, name: str, bound: dict[str, str], seen: set) -> Iterator[Drawn]:
    """The value widgets a function draws, itself or through the ui/ functions it calls or hands on."""
    if (module, name, tuple(sorted(bound.items()))) in seen:
        return
    seen.add((module, name, tuple(sorted(bound.items()))))
    function = functions(module)[name]
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and (key := widget_keys(node)) is not None:
            where = f"{modules()[module].relative_to(ROOT)}:{node.lineno}"
            yield Drawn(pattern(key, bound, function) or f"<unknown key at {where}>", where)
        if isinstance(node, ast.Call) and (callee := target(module, node.func)):
            yield from drawn_from(*callee, bindings(node, functions(callee[0])[callee[1]], bound, function), seen)
        elif isinstance(node, ast.Name | ast.Attribute) and (referred := target(module, node)):
            yield from drawn_from(*referred, {}, seen)  # handed on (a fragment, a tab's function, a callback)


@cache
def drawn_by(page_path: str) -> tuple[Drawn, ...]:
    """Every value widget a page draws, through any of its functions: those with a known key."""
    module = page_module(page_path)
    seen: set = set()
    found = [d for name in functions(module) for d in drawn_from(module, name, {}, seen)]
    known = {d.key: d for d in found if not d.key.startswith("<unknown")}
    unknown = [d for d in found if d.key.startswith("<unknown") and not any(
        k.where == d.where for k in known.values())]  # unknown on one path, known on another: known
    return (*known.values(), *unknown)


def undeclared(page_path: str, keeps: tuple[str, ...]) -> list[str]:
    return [f"{d.key} ({d.where})" for d in drawn_by(page_path) if d.key not in keeps
            and not any(fnmatch.fnmatchcase(d.key, glob) for glob in NOT_KEPT)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.title)
def test_every_value_widget_of_a_page_is_kept_or_said_not_to_be(page) -> None:
    assert undeclared(page.path, page.keeps) == [], f"declare these in {page.title}'s keeps in ui/page.py, or in " \
                                                    "NOT_KEPT here with why"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.title)
def test_a_page_keeps_only_keys_it_draws(page) -> None:
    drawn = {d.key for d in drawn_by(page.path)}
    assert [key for key in page.keeps if key not in drawn] == []
    assert not set(page.keeps) & set(NOT_KEPT)


def test_every_key_said_not_to_be_kept_is_drawn() -> None:
    drawn = {d.key for page in PAGES for d in drawn_by(page.path)}
    assert [glob for glob in NOT_KEPT if not fnmatch.filter(drawn, glob)] == []


def test_a_key_drawn_by_several_pages_is_kept_by_each() -> None:
    """The head picker's site, layer and head are one choice: every page that draws them keeps them."""
    drawing = [page for page in PAGES if "head" in {d.key for d in drawn_by(page.path)}]
    assert len(drawing) >= 3
    assert all({"site", "layer", "head"} <= set(page.keeps) for page in drawing)
    assert set(KEPT_KEYS) == {key for page in PAGES for key in page.keeps} and len(set(KEPT_KEYS)) == len(KEPT_KEYS)


def test_the_check_catches_a_widget_nobody_declared() -> None:
    """A key drawn through a ui/ helper that takes it as an argument counts, and an undeclared one is named."""
    masks = next(page for page in PAGES if page.title == "Masks")
    assert "masks_window" in {d.key for d in drawn_by(masks.path)}  # drawn by ui/mask_editor.py
    assert undeclared(masks.path, tuple(k for k in masks.keeps if k != "masks_window")) == [
        f"masks_window ({d.where})" for d in drawn_by(masks.path) if d.key == "masks_window"]
