"""Record the EAP-IG library's own numbers for toy-induction's circuit: tests/data/eap_ig_toy_reference.json.

As tests/eap_ig_reference.py does for the tiny Hugging Face models (the same library commit, loaded the same way,
the same metric: the logit difference answer − wrong after the last token), on the shipped toy-induction mapped onto
TransformerLens by tests/toy_transformer_lens.py, with the toy's own ids (<s>, then a token a character) given to the
library's `tokenize_plus`. The prompt pair: the toy's probe letters read once and then their first four again
(clean: the induction answer is the letter after the first 'q', 'b'), against the same with 'q' and 'm' swapped in
the first half (the letter after 'q' is now 'x'): only where the earlier 'q' stands differs, so the difference is
carried by the keys of the head that looks for it. Recorded: the weights' fingerprint, the ids, both logit
differences, every edge's EAP and EAP-IG (5 steps) score, `evaluate_graph` of every edge removed alone (`exact`), of
the library's top-20 EAP-IG circuit and of its top-n circuits.

    .venv/bin/python -m tests.eap_ig_toy_reference /tmp/EAP-IG
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import torch

from attention_atlas.model.registry import load_runner
from tests.circuit_models import fingerprint
from tests.eap_ig_reference import ROOT, STEPS, TOP, commit_of, load_library, logit_diff
from tests.toy_transformer_lens import toy_reference

TOY = "toy-induction"
CLEAN, CORRUPTED = "kfzqbmxrtjkfzq", "kfzmbqxrtjkfzq"
ANSWER, WRONG = "b", "x"
CURVE = (0, 1, 5, 10, 20, 30, 50, 80, 110)
OUT = ROOT / "tests" / "data" / "eap_ig_toy_reference.json"


def record() -> dict:
    """Every number the tests read."""
    # eap: the EAP-IG library's checkout, made importable by load_library at recording time only (not installed)
    from eap import attribute as attribute_module  # pyright: ignore[reportMissingImports] recording-only
    from eap import evaluate as evaluate_module  # pyright: ignore[reportMissingImports] recording-only
    from eap.attribute import attribute  # pyright: ignore[reportMissingImports] recording-only
    from eap.evaluate import evaluate_baseline, evaluate_graph  # pyright: ignore[reportMissingImports] recording-only
    from eap.graph import Graph  # pyright: ignore[reportMissingImports] recording-only

    toy = load_runner(TOY).toy  # type: ignore[attr-defined]
    model = toy_reference(toy.model)
    model.cfg.device = "cpu"
    model.cfg.use_split_qkv_input = model.cfg.use_attn_result = model.cfg.use_hook_mlp_in = True
    ids = {text: toy.encode_source(text) for text in (CLEAN, CORRUPTED)}

    def tokenize_plus(_, inputs, max_length=None):
        tokens = torch.tensor([ids[text] for text in inputs])
        return tokens, torch.ones_like(tokens), torch.full((len(inputs),), tokens.size(1)), tokens.size(1)

    attribute_module.tokenize_plus = evaluate_module.tokenize_plus = tokenize_plus
    labels = [[toy.tokenizer.vocab.index(word) for word in (ANSWER, WRONG)]]
    data = [([CLEAN], [CORRUPTED], torch.tensor(labels))]
    metric = partial(logit_diff, loss=False, mean=True)
    each = partial(logit_diff, loss=False, mean=False)
    clean = evaluate_baseline(model, data, each, quiet=True).item()
    corrupted = evaluate_baseline(model, data, each, run_corrupted=True, quiet=True).item()
    found = {"model": TOY, "fingerprint": fingerprint(toy.model), "ids": ids, "answer": ANSWER, "wrong": WRONG,
             "clean": clean, "corrupted": corrupted, "scores": {}}
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
    found = {"library": "https://github.com/hannamw/EAP-IG", "commit": args.commit or commit_of(args.checkout),
             "steps": STEPS, **record()}
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
