"""The guard on the readout: when a Hugging Face model opens, the logits this app reads from its stream (the final norm
and lm_head with the scalings model/inspect/logit_scales.py knows, model/inspect/readout.py) are held to the model's
own logits at the probe text's last token, both made from one pass of the model (model/hf/proof.py's eager one). A
family that scales its logits in a way the table does not know would otherwise give a logit lens, likeliest answers
and direct logit attribution that are not the model's, without a word: where the two differ, the model card says by
how much (readout.READOUT_REFUSED) and every view that reads through the readout refuses with that sentence, the rest
of the app working."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from attention_atlas.model.core.capture.hooks import ModuleTap
from attention_atlas.model.inspect.readout import READOUT_REFUSED, unembedding_for
from attention_atlas.model.inspect.stream_parts import prediction_hook

TOLERANCE = {torch.float32: 1e-3}  # the largest difference allowed, as a share of the largest logit (at least 1)
HALF_TOLERANCE = 2e-2  # 16-bit models: the final norm and lm_head computed again in the dtype


def readout_tap(runner: Any) -> ModuleTap | None:
    """Where the readout's input is read (the stack's output, the hook the model's prediction is read from); None
    where the model has no readout, or offers no such hook (the views that read through the readout then refuse
    for want of it)."""
    unembedding = unembedding_for(runner)
    if isinstance(unembedding, str):
        return None
    tap = runner.taps.get(prediction_hook(runner.facts, unembedding))
    return tap if isinstance(tap, ModuleTap) else None


def prove_readout(runner: Any, stream: torch.Tensor, logits: np.ndarray) -> None:
    """Note on `runner`'s card, under READOUT_REFUSED, why its readout is refused, where the readout of `stream`
    (1, d_model), the stack's output at the probe text's last token (`readout_tap`), is not `logits` (vocab,), the
    model's own made from it in the same pass."""
    unembedding = unembedding_for(runner)
    assert not isinstance(unembedding, str)
    width = runner.model.get_output_embeddings().weight.shape[1]
    if width != stream.shape[-1]:  # something the readout does not apply stands between (a projection out of it)
        _refuse(runner, f"its unembedding reads vectors of {width} numbers, and its stream has {stream.shape[-1]}: "
                        "the model maps one onto the other in a way this app's readout does not apply")
        return
    read = unembedding.readout(stream)[0].double().numpy()  # (vocab,)
    words = difference_words(read, logits.astype(np.float64), _tolerance(runner))
    if words:
        _refuse(runner, words)


def difference_words(read: np.ndarray, own: np.ndarray, tolerance: float) -> str:
    """How the logits `read` (vocab,) differ from the model's `own`, in words ("" where within `tolerance` of the
    largest logit, at least 1): by how much, and the factor where one is a multiple of the other."""
    largest = float(np.abs(own).max())
    difference = float(np.abs(read - own).max())
    if difference <= tolerance * max(1.0, largest):
        return ""
    factor = float(read @ own / max(float(read @ read), 1e-30))  # own ≈ factor x read, by least squares
    multiple = float(np.abs(factor * read - own).max()) <= tolerance * max(1.0, largest)
    return (f"the logits this app reads through the model's final norm and unembedding differ from the model's own "
            f"by {difference:.3g} at the probe text's last token (its largest logit there is {largest:.3g})"
            + (f": the model's own are {factor:.4g} × these, a scaling of its logits this app does not apply"
               if multiple else ""))


def _tolerance(runner: Any) -> float:
    return TOLERANCE.get(next(runner.model.parameters()).dtype, HALF_TOLERANCE)


def _refuse(runner: Any, why: str) -> None:
    """The runner's card notes the refusal (model/inspect/readout.py reads it there)."""
    sentence = (f"{runner.model.config.model_type}: {why}, so the logit lens and every view that reads through the "
                "readout (the likeliest answers, direct logit attribution) are not shown for this model. The other "
                "views work.")
    runner.facts = replace(runner.facts, notes={**runner.facts.notes, READOUT_REFUSED: sentence})
