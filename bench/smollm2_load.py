"""SmolLM2 load time and memory: `python -m bench.smollm2_load [--threads N]`.

1. First load (GGUF → float32 copy in a fresh temp cache, then model + tokenizer from it) vs the cached load
   (validate the copy, model + tokenizer from it), in one process. Target: cached < 3 s. Then the cached load
   once more in a fresh process, where transformers' first model load also pays its lazy imports.
2. Peak RSS of one forward pass at 2048 tokens that keeps every layer's attention, each in a fresh subprocess so
   RSS is isolated: `output_attentions=True` (float32 squares, as transformers returns them), and the app's own
   run (HFRunner: each pattern kept as the queries and keys it is computed from, logits of the last token only).
   Target: < 3 GB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.packaged import smollm2_folder

TOKENS = 2048
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat watches from the window. "
MODES = ("output_attentions", "runner")  # child modes for the RSS measurement; "load" times a fresh load


def load(folder: Path) -> tuple[torch.nn.Module, object]:
    """Model (eager attention) and tokenizer from a converted folder."""
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(folder)


def timed_load(progress: bool = False) -> tuple[float, Path]:
    """Seconds for smollm2_folder() plus loading model and tokenizer from it."""
    start = time.perf_counter()
    folder = smollm2_folder(progress=print if progress else None)
    load(folder)
    return time.perf_counter() - start, folder


def input_ids(tokenizer: object) -> torch.Tensor:
    """A repeated sentence cut to exactly TOKENS tokens, shape (1, TOKENS)."""
    ids = tokenizer(SENTENCE * (TOKENS // 8), return_tensors="pt")["input_ids"][:, :TOKENS]  # type: ignore[operator]
    assert ids.shape == (1, TOKENS), ids.shape
    return ids


def forward_rss(folder: Path, mode: str) -> None:
    """(Child) one forward keeping all attention; prints load RSS, peak RSS (GB) and kept attention (GiB)."""
    if mode == "runner":
        runner = load_hf_runner(str(folder), "smollm2")
        text = runner_text(runner.tokenizer)
    else:
        model, tokenizer = load(folder)
        ids = input_ids(tokenizer)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB → GB
    start = time.perf_counter()
    with torch.no_grad():
        if mode == "output_attentions":
            kept = list(model(ids, output_attentions=True, use_cache=False).attentions)
            shapes = f"{len(kept)} x {tuple(kept[0].shape)} {kept[0].dtype}"
        else:
            trace = runner.run(text, options=RunOptions(hooks=("*.attn.hook_pattern",)))
            kept = [torch.from_numpy(array) for source in trace.pattern_sources.values()
                    for array in (source.query, source.key)]
            shapes = f"{len(trace.pattern_sources)} patterns of {len(trace.ids)}² kept as their queries and keys"
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    gib = sum(t.numel() * t.element_size() for t in kept) / 2**30
    print(f"{mode}: {shapes} = {gib:.2f} GiB kept, {seconds:.1f} s, RSS after load {loaded:.2f} GB, "
          f"peak RSS {peak:.2f} GB (target < 3 GB: {'OK' if peak < 3 else 'MISSED'})")


def runner_text(tokenizer: object) -> str:
    """Text that the runner tokenises to exactly TOKENS tokens."""
    text = tokenizer.decode(input_ids(tokenizer)[0])  # type: ignore[attr-defined]
    while len(tokenizer(text)["input_ids"]) > TOKENS:  # type: ignore[operator]
        text = text[:-1]
    return text


def child(folder: Path, mode: str, threads: int) -> None:
    """Run a child mode in a fresh interpreter (its RSS and import state are its own)."""
    cmd = [sys.executable, "-m", "bench.smollm2_load", "--threads", str(threads), "--child", str(folder), mode]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parent.parent)
    if mode == "load":
        print(f"  (whole fresh process, interpreter start and imports included: {time.perf_counter() - start:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--child", nargs=2, metavar=("FOLDER", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable_progress_bar()
    if args.child and args.child[1] == "load":
        print(f"cached load in a fresh process (imports done): {timed_load()[0]:.2f} s")
        return
    if args.child:
        forward_rss(Path(args.child[0]), args.child[1])
        return
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as cache:
        os.environ["ATTENTION_ATLAS_CACHE"] = cache
        first, folder = timed_load(progress=True)
        cached, _ = timed_load()
        print(f"first load (GGUF → float32 copy + load): {first:.1f} s")
        print(f"cached load (model + tokenizer from copy): {cached:.2f} s (target < 3 s) "
              f"— {'OK' if cached < 3 else 'MISSED'}")
        print(f"ratio first / cached: {first / cached:.0f}x")
        child(folder, "load", args.threads)
        print(f"forward at {TOKENS} tokens keeping every layer's attention (target peak RSS < 3 GB):")
        for mode in MODES:
            child(folder, mode, args.threads)


if __name__ == "__main__":
    main()
