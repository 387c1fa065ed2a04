"""`attention-atlas circuit`: the circuit that carries one prediction, found by edge attribution, e.g.
`attention-atlas circuit --model smollm2 --clean "When Mary and John went to the store, John gave a drink to"
--corrupted "When Mary and John went to the store, Mary gave a drink to" --answer " Mary" --wrong " John"
--out circuit.json`.

Every edge between the input, the heads (each head's query, key and value apart), the MLPs and the logits gets a
score: the estimated change of the logit difference (answer − wrong, after the last token) when that edge alone
carries the corrupted text's run (EAP-IG over the inputs, --steps interpolations; or EAP) — the EAP-IG library's
graph and scores. Prints a JSON summary: the two runs' logit differences, the edges of largest |score| and the
faithfulness curve (each top-n circuit's logit difference, 0 = the corrupted run, 1 = the clean run); --out writes
every edge's score and the curve. `Model.circuit` in docs/python.md is the same from Python.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attention_atlas.api import load
from attention_atlas.command_output import print_and_write
from attention_atlas.model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES
from attention_atlas.model.core.errors import UserError

TOP = 10  # edges in the printed summary
POINTS = 12  # circuit sizes of the curve, besides none: spread evenly on a log scale up to every edge


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attention-atlas circuit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model id (attention-atlas trace --list), or a model folder")
    p.add_argument("--clean", required=True, help="the prompt whose prediction the circuit carries")
    p.add_argument("--corrupted", required=True, help="a prompt of as many tokens that changes the answer")
    p.add_argument("--answer", required=True, help="the clean prompt's answer, e.g. ' Mary' (one token)")
    p.add_argument("--wrong", required=True, help="the answer it is told from, e.g. ' John' (one token)")
    p.add_argument("--method", choices=("EAP", "EAP-IG"), default="EAP-IG", help="default EAP-IG")
    p.add_argument("--steps", type=int, default=5, help="EAP-IG's interpolations (default 5)")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA, then MPS, then CPU")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto", help="the weights' dtype")
    p.add_argument("--out", help="write every edge's score and the faithfulness curve to this .json file")
    return p


def curve_sizes(edges: int) -> list[int]:
    """0, then POINTS circuit sizes from 1 to `edges`, evenly spread on a log scale (each once)."""
    return [0, *dict.fromkeys(round(float(n)) for n in np.logspace(0, np.log10(max(edges, 1)), POINTS))]


def main(argv: list[str] | None = None) -> int:
    """0 when it printed the summary (and wrote --out); 2 with a sentence on stderr when the input is wrong, the
    model refuses (no graph, texts of different lengths, two texts alike, past the limit) or a number is not finite."""
    args = parser().parse_args(argv)
    try:
        model = load(args.model, device=args.device, precision=args.precision)
        found = model.circuit(args.clean, args.corrupted, answer=args.answer, wrong=args.wrong, method=args.method,
                              steps=args.steps)
        sizes = curve_sizes(len(found.scores))
        curve = found.faithfulness(sizes)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    fields = found.as_dict()
    kept = {name: fields[name] for name in ("method", "steps", "answer", "wrong", "clean", "corrupted")}
    ranked = sorted(found.scores.items(), key=lambda item: -abs(item[1]))[:TOP]
    summary = {"model": model.id, **kept, "edges": len(found.scores),
               "top_edges": [{"edge": edge, "score": score} for edge, score in ranked],
               "faithfulness": {str(n): value for n, value in zip(sizes, curve.tolist(), strict=True)}}
    every = {"model": model.id, **fields, "curve": {"edges": sizes, "faithfulness": curve.tolist()}}
    return print_and_write(summary, every, args.out)
