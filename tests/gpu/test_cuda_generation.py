"""Generation on the GPU, one token at a time with every layer's attention row (the Generate page's stepper, KV cache
and all), is the CPU's: every toy model, and every tiny Hugging Face model that generates, in float32 and in
bfloat16. The GPU is made to take the CPU's tokens, so that both read the same contexts; at each step its own first
choice is the CPU's token, or tied with it on the CPU's probabilities."""

from __future__ import annotations

import pytest

from tests.gpu.compare import FLOAT32, assert_same_steps, tolerance
from tests.gpu.models import DEVICE, PRECISION_NAMES, TINY, TOYS, following, steps_of
from tests.tiny_hf import ENCODER_TYPES

GENERATING = tuple(model for model in TINY if model not in ("bert", *ENCODER_TYPES))  # encoders generate nothing
STEPS = 8  # a random model's: as many as the app's continuation
TOY_STEPS = 16  # a toy model's whole answer (its examples' are shorter)


@pytest.mark.parametrize("toy", TOYS)
def test_a_toy_model_generates_on_the_gpu_as_on_the_cpu(loaded, toy: str) -> None:
    """Trained models choose clearly: the GPU's own first choice is the CPU's token at every step."""
    cpu, gpu = loaded(toy), loaded(toy, DEVICE)
    text = cpu.examples[0]
    theirs = steps_of(cpu, TOY_STEPS, text=text)
    ours = steps_of(gpu, TOY_STEPS, following(theirs), text=text)
    assert theirs
    assert_same_steps(ours, theirs, FLOAT32)
    assert [int(s.top_ids[0]) for s in ours] == [s.token_id for s in theirs]


@pytest.mark.parametrize("precision", PRECISION_NAMES)
@pytest.mark.parametrize("model", GENERATING)
def test_a_hugging_face_model_generates_on_the_gpu_as_on_the_cpu(loaded, model: str, precision: str) -> None:
    """Against float32 on the CPU; in bfloat16 to bfloat16's tolerances, its own choices differing only where the
    CPU's two best tokens are within them."""
    cpu, gpu = loaded(model), loaded(model, DEVICE, precision)
    theirs = steps_of(cpu, STEPS)
    ours = steps_of(gpu, STEPS, following(theirs))
    assert theirs
    assert_same_steps(ours, theirs, tolerance(model, precision))
