"""What mixes the tokens in a block besides softmax attention (a hybrid's state space, linear attention or short
convolution), read from the names of the block's parts and of their classes: the model card's layer map
(model/hf/facts.py) names it, and a decoder with such a block offers its stream at every block (model/hf/discovery)."""

from __future__ import annotations

from torch import nn

MIXERS = (("deltanet", "gated delta-net (linear attention)"),
          ("deltaattention", "Kimi delta attention (linear attention)"), ("mamba", "Mamba (state space)"),
          ("conv", "short convolution"))  # what a block's part is, read from its name and class's name, first match


def mixer_words(block: nn.Module) -> str | None:
    """What mixes the tokens in `block` besides softmax attention, in words ("Mamba (state space)"); None: nothing."""
    parts = [f"{name} {type(child).__name__}".lower() for name, child in block.named_children()]
    return next((words for key, words in MIXERS if any(key in part for part in parts)), None)
