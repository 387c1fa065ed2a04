"""Attention sites: where a model attends (a stack's self-attention, the decoder's cross-attention), and the hook
names of their patterns."""

from __future__ import annotations

from dataclasses import dataclass

PATTERN_SUFFIX = "hook_pattern"


@dataclass(frozen=True)
class Site:
    """An attention location: a stack's self-attention or the decoder's cross-attention. Widgets, links and a
    Trace's masks name it by `name` ("decoder.cross_attn"); `Site.of(name)` gives the rest."""

    stack: str  # "encoder" or "decoder"
    kind: str  # "attn" (self-attention) or "cross_attn" (the decoder's attention to the encoder's output)

    @classmethod
    def of(cls, name: str) -> Site:
        stack, kind = name.split(".")
        return cls(stack, kind)

    @classmethod
    def of_pattern(cls, hook_name: str) -> tuple[Site, int]:
        """"decoder.1.cross_attn.hook_pattern" -> (the decoder's cross-attention, layer 1)."""
        stack, layer, kind = hook_name.split(".")[:3]
        return cls(stack, kind), int(layer)

    @property
    def name(self) -> str:
        return f"{self.stack}.{self.kind}"

    @property
    def is_cross(self) -> bool:
        return self.kind == "cross_attn"

    @property
    def label(self) -> str:
        """How a person calls it: "encoder self-attention", "cross-attention (decoder → encoder)"."""
        return "cross-attention (decoder → encoder)" if self.is_cross else f"{self.stack} self-attention"

    def pattern_name(self, layer: int) -> str:
        """The hook name of its attention pattern at `layer`: "decoder.1.cross_attn.hook_pattern"."""
        return f"{self.stack}.{layer}.{self.kind}.{PATTERN_SUFFIX}"
