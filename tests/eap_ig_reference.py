"""Record the EAP-IG library's own numbers for the circuit tests: tests/data/eap_ig_reference.json.

The library (hannamw/EAP-IG on GitHub; not on PyPI, and CI reaches PyPI alone) is run here once, on the tiny seeded
GPT-2 and Llama (grouped-query) models of tests/circuit_models.py, converted to TransformerLens as
tests/transformer_lens_reference.py converts them, on the IOI-style prompt pair there, with the metric the app uses
(the logit difference answer − wrong after the last token: the library's `logit_diff`, loss=False, mean=True). It
records, per model: the weights' fingerprint, the token ids both read, the clean and corrupted logit differences,
every edge's EAP and EAP-IG (5 steps, `EAP-IG-inputs`) score, `evaluate_graph` of every edge removed alone from the
whole graph (the library's `exact` scores: that value minus the clean one), of the library's top-20 EAP-IG circuit
(its edges too), of the empty and the whole graph, and of its top-n circuits for the faithfulness curve.

Recorded from commit 795f5607b25638935aec89aee3c1cb4bd9ed72f1 with TransformerLens 3.9, torch 2.13:

    git clone https://github.com/hannamw/EAP-IG /tmp/EAP-IG
    git -C /tmp/EAP-IG checkout 795f5607b25638935aec89aee3c1cb4bd9ed72f1
    .venv/bin/python -m tests.eap_ig_reference /tmp/EAP-IG

The library's package is copied to a temporary folder and changed only where it hard-codes `device='cuda'` (made the
model's device, so that it runs on the CPU); its `tokenize_plus` is given the Hugging Face tokenizer's ids (the ids the
app reads; the library would put TransformerLens's BOS in front); matplotlib, which only its drawing imports, is stood
in for where it is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import types
from functools import partial
from pathlib import Path

import torch
import transformers

from tests.circuit_models import ANSWER, CLEAN, CORRUPTED, FAMILIES, WRONG, build_circuit_model, fingerprint
from tests.transformer_lens_reference import reference_of

ROOT = Path(__file__).resolve().parents[1]

STEPS = 5
TOP = 20
CURVE = (0, 1, 5, 10, 20, 50, 100, 200, 262)
OUT = ROOT / "tests" / "data" / "eap_ig_reference.json"


def load_library(checkout: Path) -> types.ModuleType:
    """The library's `eap` package, copied from `checkout` (its repository or its src/eap) with 'cuda' made the
    model's device."""
    source = checkout / "src" / "eap" if (checkout / "src" / "eap").is_dir() else checkout
    folder = Path(tempfile.mkdtemp()) / "eap"
    shutil.copytree(source, folder)
    for file in folder.glob("*.py"):
        file.write_text(file.read_text().replace("device='cuda'", "device=model.cfg.device"))
    if importlib.util.find_spec("matplotlib") is None:
        for name in ("matplotlib", "matplotlib.cm"):
            sys.modules[name] = types.ModuleType(name)
    sys.path.insert(0, str(folder.parent))
    return importlib.import_module("eap")


def commit_of(checkout: Path) -> str:
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else "unknown"


def logit_diff(logits, clean_logits, input_lengths, labels, mean=True, loss=False):
    """The library's notebooks' metric (ioi.ipynb): the logit difference after each text's last token."""
    logits = logits[torch.arange(logits.size(0)), input_lengths - 1]
    good_bad = torch.gather(logits, -1, labels.to(logits.device))
    results = good_bad[:, 0] - good_bad[:, 1]
    results = -results if loss else results
    return results.mean() if mean else results


def record(family: str, folder: Path) -> dict:
    """Every number the tests read, for one model."""
    # eap: the EAP-IG library's checkout, made importable by load_library at recording time only (not installed)
    from eap import attribute as attribute_module  # pyright: ignore[reportMissingImports] recording-only
    from eap import evaluate as evaluate_module  # pyright: ignore[reportMissingImports] recording-only
    from eap.attribute import attribute  # pyright: ignore[reportMissingImports] recording-only
    from eap.evaluate import evaluate_baseline, evaluate_graph  # pyright: ignore[reportMissingImports] recording-only
    from eap.graph import Graph  # pyright: ignore[reportMissingImports] recording-only

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = reference_of(family, hf).to("cpu")
    model.cfg.device = "cpu"
    model.cfg.use_split_qkv_input = model.cfg.use_attn_result = model.cfg.use_hook_mlp_in = True
    model.cfg.ungroup_grouped_query_attention = True
    ids = {text: tokenizer(text)["input_ids"] for text in (CLEAN, CORRUPTED)}

    def tokenize_plus(_, inputs, max_length=None):
        tokens = torch.tensor([ids[text] for text in inputs])
        return tokens, torch.ones_like(tokens), torch.full((len(inputs),), tokens.size(1)), tokens.size(1)

    attribute_module.tokenize_plus = evaluate_module.tokenize_plus = tokenize_plus
    with torch.no_grad():
        ours, theirs = hf(torch.tensor([ids[CLEAN]])).logits, model(torch.tensor([ids[CLEAN]]))
    assert torch.allclose(ours, theirs, atol=1e-4), "TransformerLens does not compute the Hugging Face model"
    labels = [[tokenizer(word, add_special_tokens=False)["input_ids"][0] for word in (ANSWER, WRONG)]]
    data = [([CLEAN], [CORRUPTED], torch.tensor(labels))]
    metric = partial(logit_diff, loss=False, mean=True)
    each = partial(logit_diff, loss=False, mean=False)
    clean = evaluate_baseline(model, data, each, quiet=True).item()
    corrupted = evaluate_baseline(model, data, each, run_corrupted=True, quiet=True).item()
    found = {"fingerprint": fingerprint(hf), "ids": ids, "answer": ANSWER, "wrong": WRONG, "clean": clean,
             "corrupted": corrupted, "scores": {}}
    for method, name, steps in (("EAP", "EAP", None), ("EAP-IG-inputs", "EAP-IG", STEPS)):
        graph = Graph.from_model(model)
        attribute(model, graph, data, metric, method=method, ig_steps=steps, quiet=True)
        found["scores"][name] = {edge: float(graph.edges[edge].score) for edge in graph.edges}
    graph = Graph.from_model(model)
    attribute(model, graph, data, metric, method="exact", quiet=True)
    found["exact"] = {edge: float(graph.edges[edge].score) for edge in graph.edges}

    def evaluated(n: int) -> tuple[float, list[str]]:
        scored = Graph.from_model(model)
        for edge, score in found["scores"]["EAP-IG"].items():
            scored.edges[edge].score = score
        scored.apply_topn(n, absolute=True)
        value = evaluate_graph(model, scored, data, each, quiet=True).item()
        return value, [edge for edge in scored.edges if bool(scored.edges[edge].in_graph)]

    value, edges = evaluated(TOP)
    found["evaluate"] = {"top": {"n": TOP, "edges": edges, "value": value},
                         "curve": {str(n): evaluated(n)[0] for n in CURVE}}
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", type=Path, help="the EAP-IG repository (or its src/eap)")
    p.add_argument("--commit", help="the library's commit, where the checkout is not a git repository")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    load_library(args.checkout)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        models = {family: record(family, build_circuit_model(family, Path(root) / family)) for family in FAMILIES}
    found = {"library": "https://github.com/hannamw/EAP-IG", "commit": args.commit or commit_of(args.checkout),
             "steps": STEPS, "models": models}
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
