"""A model whose blocks add their parts scaled (a dense Granite's residual_multiplier) offers no sum of them: no
hook_resid_mid, no hook_resid_post. The Masks page's Padding view and the Activations page's Norms view say what they
cannot show for want of those hooks, and show the rest, held to transformers' own hidden states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
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


def test_padding_says_it_cannot_show_the_outputs_change(folder) -> None:
    at = open_app_page("app_pages/masks.py", folder=str(folder), text=TEXT)
    at.session_state["masks_view"] = "Padding"
    at.run()
    assert_ok(at, "Padding")
    said = " ".join(md.value for md in at.markdown)
    assert "Largest weight on a padding key: **0**" in said
    assert "records no hook of its stack's output (`decoder.1.hook_resid_post`" in said, said


def test_the_norms_inputs_are_shown_where_recorded(folder) -> None:
    """Each layer's first norm reads the block's input (transformers' hidden state there); the second norms and the
    final one read sums the blocks do not record, and the view says so."""
    at = open_app_page("app_pages/activations.py", folder=str(folder), text=TEXT)
    at.session_state["activations_view"] = "Norms"
    at.run()
    assert_ok(at, "Norms")
    assert any("records no hook of what 0.ln2, 1.ln2, ln_final read" in c.value for c in at.caption), at.caption
    means = chart(at, "decoder: the mean μ of each norm's input")["data"][0]
    assert list(means["y"]) == ["0.ln1", "1.ln1"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.inference_mode():
        hidden = model(**tokenizer(TEXT, return_tensors="pt"), output_hidden_states=True).hidden_states
    np.testing.assert_allclose(plotly_array(means["z"]), [h[0].mean(-1).numpy() for h in hidden[:2]], rtol=1e-5,
                               atol=1e-6)
