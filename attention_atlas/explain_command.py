"""`attention-atlas explain`: why one head attends from one position to another, e.g.
`attention-atlas explain --model toy-induction --text qwertyuiop --layer 1 --head 2 --query 14 --key 5 --out e.json`.

Prints a JSON summary: the two tokens, the model's score and the cell's attention weight, and on each side (query,
key) the parts of the residual stream with the largest shares of the score (`Model.explain_score` in
docs/python.md: each side's shares add up, with any position bias, to the score). --out writes every share and the
pairs matrix (query parts x key parts) as JSON. Positions index the tokens of the site's queries and keys (a
self-attention's: the run's tokens; the summary names them).
"""

from __future__ import annotations

import argparse
import sys

from attention_atlas.api import load
from attention_atlas.command_output import print_and_write
from attention_atlas.model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES
from attention_atlas.model.core.errors import UserError

TOP = 10  # parts a side in the printed summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attention-atlas explain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model id (attention-atlas trace --list), or a model folder")
    p.add_argument("--text", required=True, help="the text (an encoder-decoder: the source)")
    p.add_argument("--layer", type=int, required=True, help="the head's layer")
    p.add_argument("--head", type=int, required=True, help="the head")
    p.add_argument("--query", type=int, required=True, help="the query's position (-1: the last)")
    p.add_argument("--key", type=int, required=True, help="the key's position (-1: the last)")
    p.add_argument("--site", help="decoder.attn, encoder.attn or decoder.cross_attn (default: the self-attention "
                                  "over the text's own tokens)")
    p.add_argument("--target", help="an encoder-decoder: the target its decoder reads (else its own output)")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA, then MPS, then CPU")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto", help="the weights' dtype")
    p.add_argument("--out", help="write every share and the pairs to this .json file")
    return p


def main(argv: list[str] | None = None) -> int:
    """0 when it printed the summary (and wrote --out); 2 with a sentence on stderr when the input is wrong or the
    model refuses (a key the mask hides, a layout whose parts cannot be told apart, parts that do not add up) or a
    number is not finite."""
    args = parser().parse_args(argv)
    try:
        model = load(args.model, device=args.device, precision=args.precision)
        found = model.explain_score(args.text, layer=args.layer, head=args.head, query=args.query, key=args.key,
                                    site=args.site, target=args.target)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = {"model": model.id, "site": found.site, "layer": found.layer, "head": found.head,
               "query": found.query, "query_token": found.query_tokens[found.query], "key": found.key,
               "key_token": found.key_tokens[found.key], "score": found.score, "probability": found.probability,
               "position_bias": found.position_bias, "position_bias_name": found.position_bias_name,
               "query_side": [{"part": name, "share": share} for name, share in found.ranked("query")[:TOP]],
               "key_side": [{"part": name, "share": share} for name, share in found.ranked("key")[:TOP]]}
    return print_and_write(summary, {"model": model.id, **found.as_dict()}, args.out)
