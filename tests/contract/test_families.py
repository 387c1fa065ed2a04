"""One place per Hugging Face family: each adapter is one module of model/hf/families/, no type has two, every
adapter's types are among the types the tests build, docs/architecture.md lists them as they are, and what only a
family knows (its module and config names) is written nowhere else."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from attention_atlas.model.hf.families import ADAPTERS, DISCOVERED, adapter_of
from tests.tiny_hf import FAMILIES, TYPES

ROOT = Path(__file__).parents[2]
FAMILY_FOLDER = ROOT / "model" / "hf" / "families"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCE_FOLDERS = ("model/core", "model/hf", "model/inspect", "ui", "viz", "app_pages", "attention_atlas")  # not the
# from-scratch models (model/scratch, model/toy), whose names are their own
# Names that belong to one family: its modules' attributes and its config's own names for its sizes.
FAMILY_NAMES = {
    "c_attn", "c_proj", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "query_key_value", "head_size",
    "qkv_proj", "Wqkv", "Wo", "q_lin", "k_lin", "v_lin", "out_lin", "attention_head_size", "key_value_proj_dim",
    "relative_attention_bias", "relative_attention_num_buckets", "compute_bias", "d_kv", "n_inner", "ffn_dim",
    "encoder_ffn_dim", "decoder_ffn_dim", "encoder_attention_heads", "hidden_dim", "n_head", "n_embd",
}


def test_each_adapter_is_one_module_and_no_type_has_two() -> None:
    modules = [Path(inspect.getfile(type(adapter))).name for adapter in ADAPTERS]
    assert len(set(modules)) == len(modules), modules
    assert sorted(modules) == sorted(p.name for p in FAMILY_FOLDER.glob("*.py")
                                     if p.name not in ("__init__.py", "adapter.py"))
    types = [t for adapter in ADAPTERS for t in adapter.model_types]
    assert len(set(types)) == len(types), types
    assert all(adapter_of(t) is a for a in ADAPTERS for t in a.model_types)
    assert adapter_of("llama") is DISCOVERED


def test_every_adapter_is_tested_on_its_types() -> None:
    """Each type an adapter lists is built by tests/tiny_hf.py, so the tests of every type (attention equal to
    eager, heads recomputed from the adapter's weights, the docs table) run on it."""
    tested = {*FAMILIES, *TYPES}
    untested = {t for adapter in ADAPTERS for t in adapter.model_types} - tested - {"roberta", "xlm-roberta",
                                                                                     "camembert"}
    assert not untested, f"types with an adapter but no tiny model: {sorted(untested)}"
    assert "roberta" in tested  # BERT's kin share its table: one of them is built


def test_the_docs_list_every_family_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("### Hugging Face families"):]
    rows = re.findall(r"^\| `model/hf/families/(\w+\.py)` \| ([^|]+) \| ([^|]+) \|", section, flags=re.MULTILINE)
    listed = {module: (family.strip(), set(re.findall(r"`([\w-]+)`", types))) for module, family, types in rows}
    for adapter in ADAPTERS:
        module = Path(inspect.getfile(type(adapter))).name
        assert listed.get(module) == (adapter.name, set(adapter.model_types)), module
    assert "adapter.py" in listed and len(listed) == len(ADAPTERS) + 1


def test_family_names_are_written_only_in_their_family_module() -> None:
    """Outside model/hf/families/, no code reads an attribute or config name that only one family has."""
    found = []
    for folder in SOURCE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if FAMILY_FOLDER in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = node.attr if isinstance(node, ast.Attribute) else (
                    node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
                if name in FAMILY_NAMES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not found, found
