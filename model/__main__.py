"""Run a model on text and save the Trace: `python -m model --model toy-reverse --text "hello" --out t.npz`.

--model takes an id from --list (toy-<task>, minilm, smollm2) or any Hugging Face model folder or hub id.

Prints a JSON summary (model id, tokens, output text, hook names with shapes). The .npz layout is
documented in docs/hooks.md; read it back with `model.core.trace.file.load_trace`, or write it with --dense to read
the attention patterns with numpy alone.
`python -m model --list` prints the model ids, one a line.
"""

from __future__ import annotations

import argparse
import json
import sys

from model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES, pick_device, pick_precision
from model.core.options import RunOptions
from model.core.trace.file import save_trace
from model.registry import list_model_ids, load_runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the model ids and exit")
    parser.add_argument("--model", help="model id (see --list)")
    parser.add_argument("--text", help="the source text (decoder-only: the prompt)")
    parser.add_argument("--target", help="trace the model reading this target instead of generating one")
    parser.add_argument("--causal", choices=["auto", "on", "off"], default="auto",
                        help="auto: as trained; on: every self-attention causal; off: no causal mask")
    parser.add_argument("--hooks", nargs="*", default=["*"], help="glob patterns of hook names to keep (default: all)")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA, then MPS, then CPU")
    parser.add_argument("--precision", choices=PRECISION_CHOICES, default="auto",
                        help="the weights' dtype; auto: bfloat16 on a GPU that has it, float16 on other GPUs, "
                             "float32 on the CPU (toy models: always float32)")
    parser.add_argument("--out", help="write the trace to this .npz file")
    parser.add_argument("--dense", action="store_true",
                        help="write every attention pattern whole, (heads, q_len, k_len) float16 under its hook name, "
                             "instead of the queries and keys it is computed from (readable with numpy alone)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(list_model_ids()))
        return 0
    if not args.model or args.text is None:
        parser.error("--model and --text are required (or --list)")
    try:
        device = pick_device(args.device)
        runner = load_runner(args.model, device=device, precision=pick_precision(args.precision, device))
        trace = runner.run(args.text, args.target, RunOptions(hooks=tuple(args.hooks), causal=args.causal))
        if args.out:
            save_trace(trace, args.out, dense=args.dense)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(trace.summary(), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
