"""How a run is made: which masks, which hooks to capture, which heads to ablate. Plain data: a Trace keeps the
options it was made with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CausalMode = Literal["auto", "on", "off"]
Stack = Literal["encoder", "decoder"]
AblationMode = Literal["zero", "mean"]  # a head's output replaced by 0, or by its mean over the positions
ABLATION_MODES: tuple[AblationMode, ...] = ("zero", "mean")
Head = tuple[str, int]  # (attention site, head index): ("decoder.3.attn", 2) (model/core/capture/ablation.py)


@dataclass(frozen=True)
class RunOptions:
    """How to run and what to capture."""

    hooks: tuple[str, ...] = ("*",)  # glob patterns of hook names to capture ("*" = all)
    causal: CausalMode = "auto"  # auto: as trained (decoder causal, encoder not); on: every self-attention
    #                              causal (the encoder too); off: no causal mask anywhere (a what-if)
    pad_to: int = 0  # append <pad> tokens to the source up to this many tokens, to show the padding mask
    blocked: tuple[tuple[int, int], ...] = ()  # (query, key) pairs hidden in the first self-attention
    #                                           (the encoder's, or a decoder-only model's)
    ablated: tuple[Head, ...] = ()  # heads whose output is replaced, in this run only (model/core/capture/ablation.py)
    ablation: AblationMode = "zero"  # by 0, or by its mean over the positions
    summarised: bool = False  # reduce every attention site in the run, on the model's device (thumbnails,
    #                           statistics, rollout: model/core/attention/summary.py), for patterns kept as sources
    #                           (Hugging Face models); else a view that needs it computes it later

    def causal_for(self, stack: Stack) -> bool:
        """Whether a stack's self-attention is causal in this run: the one place this is decided."""
        return self.causal == "on" or (stack == "decoder" and self.causal != "off")

    @property
    def trained_masks(self) -> bool:
        """Whether the masks are the ones the model was trained with (no what-if, no blocked pair)."""
        return self.causal == "auto" and not self.blocked

    def padded(self, ids: list[int], pad_id: int, limit: int) -> list[int]:
        """`ids` followed by `pad_id` up to pad_to tokens (never beyond `limit`)."""
        return ids + [pad_id] * max(0, min(self.pad_to, limit) - len(ids))

    def record(self) -> dict[str, Any]:
        """The options as plain JSON-able values (a trace file keeps them so)."""
        return {"hooks": list(self.hooks), "causal": self.causal, "pad_to": self.pad_to,
                "blocked": [list(pair) for pair in self.blocked], "ablated": [list(head) for head in self.ablated],
                "ablation": self.ablation, "summarised": self.summarised}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RunOptions:
        """Inverse of `record` (a file written before hooks or ablations were recorded reads as every hook and
        no ablation)."""
        return cls(hooks=tuple(record.get("hooks", ("*",))), causal=record["causal"], pad_to=record["pad_to"],
                   blocked=tuple(tuple(pair) for pair in record["blocked"]),
                   ablated=tuple((site, int(head)) for site, head in record.get("ablated", ())),
                   ablation=record.get("ablation", "zero"), summarised=record.get("summarised", False))
