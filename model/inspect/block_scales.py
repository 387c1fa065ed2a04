"""What a block multiplies its attention's output by before adding it to the residual stream, as the model's forward
pass in transformers does, read per model type from its config: every Granite family's `residual_multiplier` (on what
attention and the MLP add), Falcon-H1's `attention_out_multiplier` (on what attention adds beside Mamba). Those blocks
record no sum of attention's output (model/hf/discovery leaves it out where a block adds it scaled or beside another
mixer), so what each head adds to the stream is its z · W_O times this factor. (What attention reads scaled,
Falcon-H1's attention_in_multiplier and key_multiplier, is in its weights: model/inspect/head_weights.py.)"""

from __future__ import annotations

from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.logit_scales import GRANITE


def attention_write_scale(runner: Runner) -> float | None:
    """What the block multiplies attention's output by before adding it to the stream; None where this is not known."""
    config = getattr(getattr(runner, "model", None), "config", None)
    kind = getattr(config, "model_type", None)
    if kind in GRANITE:
        return float(config.residual_multiplier)  # type: ignore[union-attr]
    if kind == "falcon_h1":
        return float(config.attention_out_multiplier)  # type: ignore[union-attr]
    return None

