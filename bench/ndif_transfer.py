"""What crosses NDIF's wire for the app's runs of Llama-3.1 8B, 70B and 405B: `python -m bench.ndif_transfer`.

Computed from the models' shapes (Llama-3.1's configs: layers, heads, 8 key/value heads of 128 dimensions, a
vocabulary of 128,256, bfloat16), no weights and no network: model/ndif/transfer.py's formulas, which
tests/model/test_ndif_runs.py holds to the bytes a simulated run brings back. For 512, 2,048 and 8,192 tokens:
- every layer's queries and keys (what a run that keeps them brings back: the Attention page's Scores, a page's run
  of `*.hook_pattern` without a summary);
- the app's frame run, summarised on NDIF: each layer's thumbnails, statistics and rollout factors, the next token's
  logits (model/ndif/remote_summary.py);
- one layer's queries and keys, fetched when a view opens a head of that layer (model/ndif/fetched.py).
Prints a Markdown table (MiB = 2^20 bytes), as docs/serving.md shows it.
"""

from __future__ import annotations

from transformers import LlamaConfig

from attention_atlas.model.ndif.transfer import config_layer_bytes, config_run_bytes, config_wire_bytes

LLAMA_31 = {"8B": (32, 4096, 32), "70B": (80, 8192, 64), "405B": (126, 16384, 128)}  # layers, hidden size, heads
TOKENS = (512, 2048, 8192)


def config(name: str) -> LlamaConfig:
    layers, hidden, heads = LLAMA_31[name]
    return LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=8,
                       vocab_size=128_256)  # head_dim 128 in each


def mib(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB"


def table() -> str:
    """The Markdown table: a row a model and length."""
    lines = ["| model | tokens | every layer's q, k | the frame's run, summarised | one layer opened |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name in LLAMA_31:
        shapes = config(name)
        for n in TOKENS:
            sizes = (config_wire_bytes(shapes, n), config_run_bytes(shapes, n), config_layer_bytes(shapes, n))
            lines.append(f"| Llama-3.1-{name} | {n:,} | " + " | ".join(map(mib, sizes)) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
