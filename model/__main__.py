"""Run a model on text and save the Trace: `python -m model --model toy-reverse --text "hello" --out t.npz`.

--model takes an id from --list (toy-<task>, minilm, smollm2) or any Hugging Face model folder or hub id.

Prints a JSON summary (model id, tokens, output text, hook names with shapes). The .npz layout is
documented in docs/hooks.md; read it back with `model.core.trace.file.load_trace`, or write it with --dense to read
the attention patterns with numpy alone.
`python -m model --list` prints the model ids, one a line.

A Hugging Face model larger than one device: `--device-map auto` spreads its layers over the GPUs, then the CPU,
then the disk (accelerate's big-model inference), each device up to its `--max-memory` budget (`cpu=2GiB`,
`0=20GiB`: repeat the flag; a device not named gives all its free memory); `--offload-folder DIR` is where weights
that must be converted before they go to the disk are written (a GGUF's; safetensors are read from their files).
"""

from __future__ import annotations

import argparse
import json
import sys

from attention_atlas.model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES, pick_device, pick_precision
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.placement import Placement, parse_budgets
from attention_atlas.model.registry import list_model_ids, load_runner


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
    parser.add_argument("--device-map", choices=["auto"],
                        help="spread a Hugging Face model over the GPUs, the CPU and the disk (accelerate)")
    parser.add_argument("--max-memory", action="append", default=[], metavar="DEVICE=SIZE",
                        help="with --device-map: the most a device holds (cpu=2GiB, 0=20GiB); repeat for each device")
    parser.add_argument("--offload-folder", metavar="DIR", help="with --device-map: where converted weights that go to "
                        "the disk are written")
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
    if (args.max_memory or args.offload_folder) and not args.device_map:
        parser.error("--max-memory and --offload-folder go with --device-map auto")
    try:
        device = pick_device(args.device)
        placement = (Placement(parse_budgets(args.max_memory), args.offload_folder) if args.device_map else None)
        runner = load_runner(args.model, device=device, precision=pick_precision(args.precision, device),
                             placement=placement)
        trace = runner.run(args.text, args.target, RunOptions(hooks=tuple(args.hooks), causal=args.causal))
        if args.out:
            trace.save(args.out, dense=args.dense)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(trace.summary(), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
