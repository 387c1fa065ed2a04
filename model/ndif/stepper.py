"""Generation a token at a time on NDIF, for the Generate page (model/core/generation/decoding.py): nnsight's
`generate` reads, at each of its passes, the last query's attention row in every layer (over the keys the pass read)
and the logits, so that one request serves the steps a greedy generation takes next.

The page chooses each token here (greedy, or sampled with its seed, or forced). A request generates greedily as many
tokens as the page's call may ask for (`Stepper.ahead`), its passes kept by the context each read; a choice that
leaves that path (a sampled or forced token) starts a request from there, of one token at a time for the rest of
that call. Each pass is the local stepper's: the rows of a model's own masks, the cache's keys (a sliding-window
layer's last ones), in the model's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.hf.chunks import chunk_size
from attention_atlas.model.hf.text import eos_ids

PATTERN = ".attn.hook_pattern"  # a decoder layer's self-attention pattern hook
AHEAD_BYTES = 256 << 20  # the attention rows one request brings back at most (float32 here)
Pass = tuple[torch.Tensor, dict[str, np.ndarray]]  # a pass's logits (vocab,), its rows {hook name: (1, heads, 1, k)}


class Passes:
    """The passes of one Stepper's generation: those a request brought back, by the context they read, and the
    request that brings the next ones (`send(ids, tokens)` -> the reads of remote.step_rows, a pass each)."""

    def __init__(self, send: Callable[[list[int], int], list[Any]], names: list[str], row_bytes: int) -> None:
        """names: the attention layers' pattern hook names, in the order the requests read them; row_bytes: one
        pass's rows' bytes a token of context."""
        self.send, self.names, self.row_bytes = send, names, row_bytes
        self.kept: dict[tuple[int, ...], Pass] = {}
        self.remaining, self.left_path, self.in_call = 1, False, False

    def ahead(self, steps: int) -> None:
        """The call that follows asks for `steps` passes at most."""
        self.remaining, self.left_path, self.in_call = max(1, steps), False, False

    def forward(self, ids: list[int]) -> Pass:
        """The pass that reads `ids`: kept, or brought by a request for it and the passes after it."""
        if tuple(ids) not in self.kept:
            self.left_path = self.left_path or self.in_call  # this call chose other than the greedy token
            tokens = 1 if self.left_path else self.remaining
            tokens = max(1, min(tokens, AHEAD_BYTES // (self.row_bytes * (len(ids) + tokens))))
            self.kept.clear()
            context = list(ids)
            for index, (read, rows, logits) in enumerate(self.send(ids, tokens)):
                if index:  # a later pass reads the token the pass before it chose
                    context.append(int(read[-1]))
                self.kept[tuple(context)] = (logits.float(), {name: row.float().numpy()[None, :, None]
                                                               for name, row in zip(self.names, rows, strict=True)})
        self.remaining, self.in_call = max(1, self.remaining - 1), True
        return self.kept[tuple(ids)]


def ndif_stepper(runner: Any, text: str) -> Stepper:
    """Generation from `text` on the NDIF model of `runner` (model/ndif/runner.py), under its own masks."""
    hosted = runner.hosted
    patterns = sorted((name for name in hosted.taps if name.startswith("decoder.") and name.endswith(PATTERN)),
                      key=lambda name: hosted.probe.order[(hosted.paths[hosted.taps[name].module], "attention")])
    modules = [hosted.taps[name].module for name in patterns]  # in the forward pass's order, as a request reads them
    if any(chunk_size(module) for module in modules):
        raise UserError("Generation a token at a time reads each layer's attention on NDIF under the causal mask "
                        "and sliding windows; this model attends within chunks (Llama 4): load it here for it.")
    ids = runner.text.encode(text)
    heads = runner.facts.n_heads
    passes = Passes(runner.passes_sender([hosted.paths[module] for module in modules]), patterns,
                    4 * heads * len(patterns))
    model = hosted.model._module  # its config and generation config (on the meta device where it is sent)

    def decode(generated: list[int]) -> str:
        return runner.text.decode(generated, skip_special_tokens=True)

    prompt = decode(ids)

    def continuation(generated: list[int]) -> str:  # decoded with the prompt: a word's leading space is kept
        return decode([*ids, *generated])[len(prompt):]

    return Stepper(ids, passes.forward, eos_ids(model), runner.text.max_tokens, runner.text.tokens, continuation,
                   ahead=passes.ahead)
