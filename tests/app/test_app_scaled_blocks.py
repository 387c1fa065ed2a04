"""A model whose blocks add their parts scaled (a dense Granite's residual_multiplier) offers no sum inside them: no
hook_resid_mid, no hook_resid_post of its layers. Its stream is read block by block instead (`decoder.blocks.{b}.`,
as a hybrid's), so the Activations page's Residual stream, Logit lens and Trajectories, the Masks page's Padding view,
the final norm's input in the Norms view and the Tour read it there, held to transformers' own hidden states; what
the blocks do not record (the sum before each MLP's norm) is said, not drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.tour import tour_options, tour_steps
from tests.app.app_session import assert_ok, open_app_page
from tests.last_block import last_block_and_logits
from tests.plotly_specs import chart, chart_specs, plotly_array
from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer

TEXT = "the cat sat on the mat"
SCALED = {"residual_multiplier": 0.22, "embedding_multiplier": 12.0, "logits_scaling": 4.0}  # as Granite 3's configs


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model("granite", vocab_size=vocab, **(SHARED | SCALED))
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("scaled-blocks") / "granite"
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reference(folder) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """transformers' own: each block's input (pos, d_model), the last block's output, and the logits (pos, vocab)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tokenizer(TEXT)["input_ids"]
    with torch.inference_mode():
        hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    last, logits = last_block_and_logits(model, ids)
    return [h[0].numpy() for h in hidden[:-1]], last.numpy(), logits.numpy()


def test_padding_shows_the_change_of_the_last_blocks_output(folder) -> None:
    at = open_app_page("app_pages/masks.py", folder=str(folder), text=TEXT)
    at.session_state["masks_view"] = "Padding"
    at.run()
    assert_ok(at, "Padding")
    said = " ".join(md.value for md in at.markdown)
    assert "Largest weight on a padding key: **0**" in said
    assert "the last block's residual stream, `decoder.blocks.1.hook_resid_post`" in said, said


def test_the_norms_inputs_are_shown_where_recorded(folder, reference) -> None:
    """Each layer's first norm reads the block's input, and the final norm the last block's output (transformers'
    own); the second norms read sums the blocks do not record, and the view says so."""
    at = open_app_page("app_pages/activations.py", folder=str(folder), text=TEXT)
    at.session_state["activations_view"] = "Norms"
    at.run()
    assert_ok(at, "Norms")
    assert any("records no hook of what 0.ln2, 1.ln2 read" in c.value for c in at.caption), at.caption
    means = chart(at, "decoder: the mean μ of each norm's input")["data"][0]
    assert list(means["y"]) == ["0.ln1", "1.ln1", "ln_final"]
    inputs, last, _ = reference
    np.testing.assert_allclose(plotly_array(means["z"]), [x.mean(-1) for x in (*inputs, last)], rtol=1e-5,
                               atol=1e-6)


def test_the_stream_views_read_every_block(folder, reference) -> None:
    """The Residual stream has a row at each block's boundary, the Logit lens a row a block whose last is the model's
    own prediction, and the Trajectories a point before the first block and after each (before: the lens and the
    trajectories failed on the missing decoder.0.hook_resid_post)."""
    inputs, last, logits = reference
    at = open_app_page("app_pages/activations.py", folder=str(folder), text=TEXT)
    assert_ok(at, "Residual stream")
    boundaries = chart(at, "‖residual‖ before the first block")["data"][0]
    assert list(boundaries["y"]) == ["L0 pre", "L0 post", "L1 post"]
    np.testing.assert_allclose(plotly_array(boundaries["z"]), np.linalg.norm(np.stack([*inputs, last]), axis=-1),
                               rtol=1e-5)
    at.session_state["activations_view"] = "Logit lens"
    at.run()
    assert_ok(at, "Logit lens")
    grid = chart(at, "logit lens")["data"][0]
    assert len(grid["y"]) == 2  # a row a block
    lens = plotly_array(grid["z"])  # (blocks, positions): each cell's top probability
    probabilities = torch.softmax(torch.from_numpy(logits[-1]).double(), -1)
    assert lens[-1, -1] == pytest.approx(float(probabilities.max()), rel=1e-4)
    at.session_state["activations_view"] = "Trajectories"
    at.run()
    assert_ok(at, "Trajectories")
    lines = chart_specs(at)[0]["data"]
    assert lines and all(len(plotly_array(line["x"])) == 3 for line in lines if line.get("mode") != "markers")


def test_the_tour_draws_the_stream_after_every_block(folder, reference) -> None:
    """The Tour's blocks step appears (before: no hook of a block's output, so no step) and draws the length of each
    token's vector after each block, the last being the last block's output."""
    runner = load_hf_runner(str(folder))
    trace = runner.run(TEXT, None, tour_options(runner.facts))
    keys = [step.key for step in tour_steps(trace)]
    step = tour_steps(trace)[keys.index("decoder.blocks")]
    assert "Each of the 2 blocks does the same" in step.text
    at = open_app_page("app_pages/tour.py", folder=str(folder), text=TEXT,
                       params={"step": str(keys.index("decoder.blocks"))})
    assert_ok(at, "Tour")
    lengths = chart(at, "decoder.blocks.*.hook_resid_post")["data"][0]
    assert list(lengths["y"]) == ["after block 0 (softmax attention)", "after block 1 (softmax attention)"]
    np.testing.assert_allclose(plotly_array(lengths["z"])[-1], np.linalg.norm(reference[1], axis=-1), rtol=1e-5)
