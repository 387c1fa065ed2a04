"""A hybrid's residual stream at every block, attention or not (`decoder.blocks.{b}.hook_resid_pre` and
`hook_resid_post`; Falcon-H1's too, whose every block runs attention beside Mamba, and a dense Granite's, whose blocks
add their parts scaled by residual_multiplier and so offer no sum of their own): each is transformers' own hidden
state at that block, the stream hands on from block to block, and the residual views (plot.stream) read it: its norm
after every block, what each block writes, and the logit lens, whose last block is the model's own prediction."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.readout import unembedding_for
from attention_atlas.plot.stream import (
    lens_read,
    residual,
    residual_measure,
    residual_rows,
    stream_hooks,
    stream_patterns,
)
from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer
from tests.tiny_hybrids import ATTENTION_BLOCKS, HYBRID_TYPES, build_hybrid

pytestmark = pytest.mark.slow  # ten models built and opened (about 12 s): make test runs it, make check does not
TEXT = "the quick brown fox jumps over the lazy dog"
GRANITE: dict[str, object] = {"residual_multiplier": 0.22, "embedding_multiplier": 12.0,
                               "logits_scaling": 4.0}  # as Granite 3's configs
SCALED_DENSE: dict[str, dict[str, object]] = {  # every block softmax attention, each adding its parts scaled
    "granite": GRANITE, "granitemoe": GRANITE | {"num_local_experts": 4, "num_experts_per_tok": 2}}
HYBRIDS = list(HYBRID_TYPES)
STREAMED = [*HYBRIDS, *SCALED_DENSE]
BLOCKS = {t: int(settings.get("num_hidden_layers", 4)) for t, settings in HYBRID_TYPES.items()} | \
    {t: int(SHARED["num_hidden_layers"]) for t in SCALED_DENSE}  # blocks of each
ATTENDING = ATTENTION_BLOCKS | {t: tuple(range(BLOCKS[t])) for t in SCALED_DENSE}  # its softmax attention blocks


def build_scaled_dense(model_type: str, folder: Path) -> Path:
    """Save a tiny random `model_type` (one of SCALED_DENSE) and a word-level tokenizer into `folder`."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **(SHARED | SCALED_DENSE[model_type]))
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def opened(tmp_path_factory) -> dict:
    """model type -> (its folder, its runner)."""
    root = tmp_path_factory.mktemp("hybrid-stream")
    folders = {t: (build_scaled_dense if t in SCALED_DENSE else build_hybrid)(t, root / t) for t in STREAMED}
    return {t: (folder, load_hf_runner(str(folder))) for t, folder in folders.items()}


def test_a_dense_granite_offers_no_sum_inside_its_blocks(opened) -> None:
    """Why its stream is read block by block: its blocks add attention's and the MLP's outputs scaled, so discovery
    places none of their sums; its card has no layer map (every block is softmax attention)."""
    for model_type in SCALED_DENSE:
        runner = opened[model_type][1]
        assert "decoder.0.hook_resid_post" not in runner.taps and "hook_resid_post" in runner.family.unplaced
        assert runner.facts.attention_blocks == [] and "layer map" not in runner.facts.notes


@pytest.mark.parametrize("model_type", STREAMED)
def test_every_blocks_stream_is_the_models_hidden_state(opened, model_type: str) -> None:
    folder, runner = opened[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=stream_patterns("decoder")))
    eager = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        hidden = eager(input_ids=torch.tensor([trace.ids]), output_hidden_states=True, use_cache=False).hidden_states
    kinds = trace.facts.block_kinds
    assert len(kinds) == len(hidden) - 1 == BLOCKS[model_type]
    assert [b for b, kind in enumerate(kinds) if kind.startswith("softmax attention")] == list(ATTENDING[model_type])
    assert any(kind != "softmax attention" for kind in kinds) != (model_type in SCALED_DENSE)  # a hybrid's block of
    # more than softmax attention, or none; a dense model's blocks are softmax attention alone
    for b in range(len(kinds)):
        np.testing.assert_allclose(trace.captured[f"decoder.blocks.{b}.hook_resid_pre"], hidden[b][0].numpy(),
                                   atol=1e-5, err_msg=f"block {b}")
        if b + 1 < len(kinds):  # (the last hidden state is the final norm's output)
            np.testing.assert_array_equal(trace.captured[f"decoder.blocks.{b}.hook_resid_post"],
                                          trace.captured[f"decoder.blocks.{b + 1}.hook_resid_pre"])
    final = runner.model.base_model.get_submodule(runner.family.final_norm)
    with torch.inference_mode():  # the last block's output is the stream before the final norm
        normed = final(torch.from_numpy(trace.captured[f"decoder.blocks.{len(kinds) - 1}.hook_resid_post"]))
    np.testing.assert_allclose(normed.numpy(), hidden[-1][0].numpy(), atol=1e-5)
    assert stream_hooks(trace, "decoder") == ["decoder.blocks.0.hook_resid_pre",
                                              *(f"decoder.blocks.{b}.hook_resid_post" for b in range(len(kinds)))]


@pytest.mark.parametrize("model_type", STREAMED)
def test_the_residual_view_reads_every_block(opened, model_type: str) -> None:
    """The norm after every block, and what each block writes (its output minus its input), one row a block."""
    _, runner = opened[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=stream_patterns("decoder")))
    stream = [trace.captured[h] for h in stream_hooks(trace, "decoder")]  # blocks + 1 x (pos, d_model)
    np.testing.assert_allclose(residual_measure(trace, "decoder", "boundaries"),
                               np.stack([np.linalg.norm(x, axis=-1) for x in stream]), rtol=1e-6)
    writes = residual_measure(trace, "decoder", "block")
    np.testing.assert_allclose(writes, np.stack([np.linalg.norm(after - before, axis=-1)
                                                 for before, after in pairwise(stream)]), rtol=1e-5, atol=1e-6)
    assert residual_rows(trace, "decoder", "block")[1] == \
        ("L1 softmax attention + Mamba" if model_type == "falcon_h1" else "L1 softmax attention")
    assert residual_rows(trace, "decoder", "boundaries")[:2] == ["L0 pre", "L0 post"]


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "jamba", "falcon_h1", *SCALED_DENSE])
def test_the_logit_lens_reads_every_block_and_ends_at_the_models_prediction(opened, model_type: str) -> None:
    _, runner = opened[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=stream_patterns("decoder")))
    positions = np.arange(len(trace.tokens))
    read = lens_read(trace, unembedding_for(runner), positions)
    assert read.top_ids.shape[0] == BLOCKS[model_type]  # a row a block, not a row an attention layer
    assert read.top_ids[-1, -1, 0] == trace.outputs["top_next_ids"][0]
    np.testing.assert_allclose(read.top_probs[-1, -1, 0], trace.outputs["top_next_probs"][0], rtol=1e-4)


def test_a_trace_file_keeps_every_blocks_stream(opened, tmp_path) -> None:
    _, runner = opened["lfm2"]
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.blocks.*",)))
    trace.save(tmp_path / "lfm2.npz")
    again = Trace.load(tmp_path / "lfm2.npz")
    assert again.facts.block_kinds == trace.facts.block_kinds and len(again.facts.block_kinds) == 4
    np.testing.assert_array_equal(again.captured["decoder.blocks.2.hook_resid_post"],
                                  trace.captured["decoder.blocks.2.hook_resid_post"])


def test_the_notebooks_residual_figure_reads_every_block(opened) -> None:
    """`attention_atlas.plot.residual` draws what the page draws, and names the measures a hybrid has."""
    _, runner = opened["jamba"]
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.blocks.*",)))
    figure = residual(trace, measure="block")
    assert list(figure.data[0].y) == ["L0 Mamba", "L1 softmax attention", "L2 Mamba", "L3 softmax attention"]
    with pytest.raises(UserError, match="measure is one of 'boundaries', 'block', 'block_share', 'cosine'"):
        residual(trace, measure="attn")
    with pytest.raises(UserError, match=r"decoder\.blocks"):
        residual(runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern",))), stack="decoder")
