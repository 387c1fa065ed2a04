"""A from-scratch pre-norm decoder (`toy-induction`: model/scratch/) run as a circuit's graph
(model/inspect/circuit_pass.py): its texts encoded as the toy reads a prompt (<s>, then one token a character), its
hook points edited for this thread alone (model/core/capture/hooks.py `editing`), each MLP's own input edited at
`hook_mlp_in` (what the MLP's norm reads, apart from the stream). The model gives log-probabilities, whose differences
are the logits'."""

from __future__ import annotations

import torch

from attention_atlas.model.core.capture.hooks import Edit
from attention_atlas.model.core.capture.patching import edits_by_tap, point_editing
from attention_atlas.model.core.masks import self_attention_mask
from attention_atlas.model.core.runner import Runner


class ScratchGraphForward:
    """How a from-scratch pre-norm decoder runs as its graph."""

    mlp_in = "hook_mlp_in"

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.toy = runner.toy  # type: ignore[attr-defined]

    @property
    def device(self) -> torch.device:
        return self.toy.model.device

    def encode(self, text: str) -> list[int]:
        return self.toy.encode_source(text)

    def tokens(self, ids: list[int]) -> list[str]:
        return self.toy.tokenizer.tokens(ids)

    def logits(self, ids: torch.Tensor, edits: dict[str, Edit]) -> torch.Tensor:
        """(batch, vocab) float32: the log-probabilities after the last token of `ids` (batch, len), each hook
        edited."""
        model = self.toy.model
        mask = self_attention_mask(ids.shape[1], ids.shape[1], True, device=self.device)  # (1, 1, len, len)
        with point_editing(edits_by_tap(model.hook_points, edits)):
            return model(ids.to(self.device), mask)[:, -1].float()
