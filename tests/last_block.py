"""What a transformers causal LM's last block hands on and its logits, read from the model itself (a forward hook on
its last decoder layer): the reference for the stream the app reads its prediction from."""

from __future__ import annotations

import torch
import transformers


def last_block_and_logits(model: transformers.PreTrainedModel, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos, d_model) the output of `model`'s last block on `ids`, before its final norm, and (pos, vocab) its
    logits."""
    held = []
    last = model.base_model.layers[-1]
    hook = last.register_forward_hook(lambda module, args, out: held.append(out[0] if isinstance(out, tuple) else out))
    try:
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    finally:
        hook.remove()
    return held[0][0], logits
