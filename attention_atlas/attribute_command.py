"""`attention-atlas attribute`: direct logit attribution of one prediction, e.g.
`attention-atlas attribute --model smollm2 --text "When Mary and John went to the store, John gave a drink to"
--answer " Mary" --wrong " John" --out mary.json`.

Prints a JSON summary: the model's logit (difference), the parts' sum, and the heads with the largest shares. --out
writes every share (`heads` (layers, heads), `mlp` (layers,), the biases …) as JSON. --corrupted patches too (a text
of as many tokens, e.g. with " Mary" and " John" swapped): the summary gains the two runs' logit differences and,
for each kind, the activation that restores most; --out every patched run's difference (`patching.results`:
`resid_pre`, `attn_out`, `mlp_out` (layers, positions), `head_out` (layers, heads)) and each normalised. --estimate:
attribution patching's estimate instead (seconds). docs/attribution.md explains the methods; `Model.attribute` and
`Model.patch` in docs/python.md are the same from Python.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attention_atlas.api import load
from attention_atlas.command_output import print_and_write
from attention_atlas.model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.inspect.patching import HEAD_KINDS, Patching

TOP = 10  # heads in the printed summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attention-atlas attribute", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model id (attention-atlas trace --list), or a model folder")
    p.add_argument("--text", required=True, help="the prompt (an encoder-decoder: the source)")
    p.add_argument("--answer", required=True, help="the token whose logit is split, e.g. ' Mary' (one token)")
    p.add_argument("--wrong", help="a token whose logit is subtracted, e.g. ' John' (one token)")
    p.add_argument("--target", help="an encoder-decoder: the target its decoder reads (else its own output)")
    p.add_argument("--position", type=int, default=-1,
                   help="the position of the decoder's sequence whose prediction is split (default -1: the last)")
    p.add_argument("--corrupted", help="also patch: a corrupted text of as many tokens (needs --wrong)")
    p.add_argument("--estimate", action="store_true", help="with --corrupted: attribution patching's estimate")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA, then MPS, then CPU")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto", help="the weights' dtype")
    p.add_argument("--out", help="write every share to this .json file")
    return p


def main(argv: list[str] | None = None) -> int:
    """0 when it printed the summary (and wrote --out); 2 with a sentence on stderr when the input is wrong, the
    model refuses (a hook it lacks, parts that do not add up, two texts alike) or a number is not finite."""
    args = parser().parse_args(argv)
    try:
        model = load(args.model, device=args.device, precision=args.precision)
        found = model.attribute(args.text, args.answer, args.wrong, target=args.target, position=args.position)
        patched = None
        if args.corrupted is not None:
            if args.wrong is None:
                raise UserError("Patching reads a logit difference: give --wrong as well.")
            patched = model.patch(args.text, args.corrupted, answer=args.answer, wrong=args.wrong, target=args.target,
                                  position=args.position, estimate=args.estimate)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = {"model": model.id, "position": found.position, "token": found.token, "answer": found.answer,
               "wrong": found.wrong, "model_logit": found.model_logit, "total": found.total,
               "top_heads": [{"site": site, "layer": layer, "head": head, "share": share}
                             for site, layer, head, share in found.ranked()[:TOP]]}
    if patched is not None:
        summary["patching"] = {"clean": patched.clean, "corrupted": patched.corrupted,
                               "estimated": patched.estimated, "most_restored": most_restored(patched)}
    every = {"model": model.id, **found.as_dict(), **({} if patched is None else {"patching": patched.as_dict()})}
    return print_and_write(summary, every, args.out)


def most_restored(patched: Patching) -> dict[str, dict[str, float | int]]:
    """By kind, the cell whose patch brings back most of the clean run: its layer, its position (or head), and the
    share restored (1 = the clean run); a kind with no cell patched is left out."""
    found = {}
    for kind in patched.results:
        normalised = patched.normalised(kind)
        if not np.isfinite(normalised).any():
            continue
        layer, other = np.unravel_index(np.nanargmax(normalised), normalised.shape)
        where = "head" if kind in HEAD_KINDS else "position"
        found[kind] = {"layer": int(layer), where: int(other), "restored": float(normalised[layer, other])}
    return found
