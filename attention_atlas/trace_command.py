"""`attention-atlas trace`: run a model on text and save its Trace,
e.g. `attention-atlas trace --model toy-reverse --text "hello" --out t.npz`.

--model takes an id from --list (toy-<task>, minilm, smollm2), a toy model folder (`attention-atlas train --out DIR`),
or any Hugging Face model folder or hub id.

Prints a JSON summary (model id, tokens, output text, hook names with shapes). The .npz layout is documented in
docs/hooks.md; read it back with `attention_atlas.load_trace`, or write it with --dense to read the attention patterns
with numpy alone. `attention-atlas trace --list` prints the model ids, one a line.

A Hugging Face model larger than one device: `--device-map auto` spreads its layers over the GPUs, then the CPU,
then the disk (accelerate's big-model inference), each device up to its `--max-memory` budget (`cpu=2GiB`,
`0=20GiB`: repeat the flag; a device not named gives all its free memory); `--offload-folder DIR` is where weights
that must be converted before they go to the disk are written (a GGUF's; safetensors are read from their files).
"""

from __future__ import annotations

import argparse
import json
import sys

from attention_atlas.api import list_models, load
from attention_atlas.model.core.devices import DEVICE_CHOICES, PRECISION_CHOICES
from attention_atlas.model.core.errors import UserError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attention-atlas trace", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="print the model ids and exit")
    p.add_argument("--model", help="model id (see --list), or a model folder")
    p.add_argument("--text", help="the source text (decoder-only: the prompt)")
    p.add_argument("--target", help="trace the model reading this target instead of generating one")
    p.add_argument("--causal", choices=["auto", "on", "off"], default="auto",
                   help="auto: as trained; on: every self-attention causal; off: no causal mask")
    p.add_argument("--hooks", nargs="*", default=["*"], help="glob patterns of hook names to keep (default: all)")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA, then MPS, then CPU")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto",
                   help="the weights' dtype; auto: bfloat16 on a GPU that has it, float16 on other GPUs, "
                        "float32 on the CPU (toy models: always float32)")
    p.add_argument("--device-map", choices=["auto"],
                   help="spread a Hugging Face model over the GPUs, the CPU and the disk (accelerate)")
    p.add_argument("--max-memory", action="append", default=[], metavar="DEVICE=SIZE",
                   help="with --device-map: the most a device holds (cpu=2GiB, 0=20GiB); repeat for each device")
    p.add_argument("--offload-folder", metavar="DIR",
                   help="with --device-map: where converted weights that go to the disk are written")
    p.add_argument("--out", help="write the trace to this .npz file")
    p.add_argument("--dense", action="store_true",
                   help="write every attention pattern whole, (heads, q_len, k_len) float16 under its hook name, "
                        "instead of the queries and keys it is computed from (readable with numpy alone)")
    return p


def main(argv: list[str] | None = None) -> int:
    """The command: 0 when it printed the summary (and wrote --out), 2 with a sentence on stderr when the input is
    wrong (argparse's own errors exit 2 too)."""
    command = parser()
    args = command.parse_args(argv)
    if args.list:
        print("\n".join(list_models()))
        return 0
    if not args.model or args.text is None:
        command.error("--model and --text are required (or --list)")
    if (args.max_memory or args.offload_folder) and not args.device_map:
        command.error("--max-memory and --offload-folder go with --device-map auto")
    try:
        model = load(args.model, device=args.device, precision=args.precision, device_map=args.device_map,
                     max_memory=args.max_memory, offload_folder=args.offload_folder)
        trace = model.run(args.text, target=args.target, hooks=args.hooks, causal=args.causal)
        if args.out:
            trace.save(args.out, dense=args.dense)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(trace.summary(), ensure_ascii=False))
    return 0
