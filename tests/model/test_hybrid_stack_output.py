"""Where a hybrid's stream ends (`stream_parts.stack_output`: its last block's output, attention or not, where the
app's last attention layer may record none): the Masks page's Padding view reads it, unchanged by padding, and the
final norm reads it (the Activations page's Norms view, through `norm_input`), as every other norm reads the stream
named for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import transformers

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.norm_inputs import norm_input
from attention_atlas.model.inspect.stream_parts import stack_output
from tests.last_block import last_block_and_logits
from tests.tiny_hybrids import HYBRID_TYPES, build_hybrid

TEXT = "the quick brown fox jumps over the lazy dog"
SCALED = ("granitemoehybrid", "falcon_h1")  # no hook_resid_post in their attention layers (scaled sums)


@pytest.fixture(scope="module")
def opened() -> dict:
    """model type -> (its folder, its runner), each built on first use."""
    return {}


def open_hybrid(opened: dict, model_type: str, root: Path) -> tuple[Path, object]:
    if model_type not in opened:
        folder = build_hybrid(model_type, root / model_type)
        opened[model_type] = (folder, load_hf_runner(str(folder)))
    return opened[model_type]


@pytest.mark.parametrize("model_type", SCALED)
def test_the_padding_view_reads_the_last_blocks_output(opened, tmp_path_factory, model_type: str) -> None:
    """The stack's output is the model's last block's, and padding the text leaves its real tokens' rows as they
    were (what the Padding view reports as the largest change)."""
    folder, runner = open_hybrid(opened, model_type, tmp_path_factory.mktemp("hybrid-output"))
    hook = stack_output(runner.facts, "decoder")
    assert hook == f"decoder.blocks.{int(HYBRID_TYPES[model_type].get('num_hidden_layers', 4)) - 1}.hook_resid_post"
    plain = runner.run(TEXT, options=RunOptions(hooks=(hook,)))
    padded = runner.run(TEXT, options=RunOptions(hooks=(hook,), pad_to=len(plain.ids) + 3))
    assert len(padded.ids) == len(plain.ids) + 3
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    stream, _ = last_block_and_logits(model, plain.ids)
    np.testing.assert_allclose(plain.captured[hook], stream.numpy(), atol=1e-5)
    np.testing.assert_allclose(padded.captured[hook][:len(plain.ids)], plain.captured[hook], atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_every_norm_reads_the_stream_named(opened, tmp_path_factory, model_type: str) -> None:
    """Each recorded norm's input (`norm_input`), the final norm's too, is what it read: its mean square over d_model
    is the square of the model's own `hook_scale` (RMSNorm), less the norm's epsilon."""
    _, runner = open_hybrid(opened, model_type, tmp_path_factory.mktemp("hybrid-output"))
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_scale", "*.hook_resid_*")))
    scales = {name: value for name, value in trace.captured.items() if name.endswith("hook_scale")}
    assert "decoder.ln_final.hook_scale" in scales and "RMS" in trace.facts.norm
    for name, scale in scales.items():
        source = norm_input(trace.facts, name)
        x = trace.captured[source].astype(np.float64)  # (pos, d_model)
        np.testing.assert_allclose((x**2).mean(-1), scale[:, 0].astype(np.float64) ** 2, rtol=2e-3, atol=1.1e-5,
                                   err_msg=f"{name} reads {source}")
