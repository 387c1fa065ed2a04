"""The guard on the readout (model/hf/readout_proof.py): when a model opens, the logits the app reads through its final
norm and unembedding are held to the model's own at the probe text's last token. A scaling of the logits that
model/inspect/logit_scales.py does not know (here: Granite's 1/logits_scaling, taken out of its table), or an
unembedding that reads something other than the stream (a pre-norm OPT whose embeddings are projected in and out of
it), is refused with a sentence naming the difference in the logit lens, the likeliest answers and direct logit
attribution, never drawn as a wrong number; the model still opens and runs. Every tiny model type of the suite reads
its own logits."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.readout_proof import readout_tap
from attention_atlas.model.inspect import logit_scales
from attention_atlas.model.inspect.attribution import attribute, attribution_options, likeliest
from attention_atlas.model.inspect.readout import READOUT_REFUSED, logit_map, unembedding_for
from attention_atlas.plot.stream import logit_lens, residual
from tests.last_block import last_block_and_logits
from tests.model.test_readout_scales import SCALED
from tests.tiny_hf import (
    DECODER_TYPES,
    FAMILIES,
    LM_SPECIALS,
    MLA_TYPES,
    SEQ2SEQ_TYPES,
    SHARED,
    WORDS,
    _tokenizer,
    build,
    build_type,
)
from tests.tiny_hybrids import HYBRID_TYPES, build_hybrid
from tests.tiny_llama4 import build_llama4
from tests.tiny_sinks import build_gpt_oss

TEXT = "the quick brown fox jumps over the lazy dog"
GRANITE = {"logits_scaling": 4.0, "residual_multiplier": 0.22, "embedding_multiplier": 12.0}  # as Granite 3's


def build_decoder(model_type: str, folder: Path, **settings: object) -> Path:
    """A tiny random decoder of `model_type` with tiny_hf.SHARED | `settings`, and its tokenizer."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **(SHARED | settings))
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


def test_a_logit_scaling_the_table_does_not_know_is_refused(tmp_path, monkeypatch) -> None:
    folder = build_decoder("granite", tmp_path / "granite", **GRANITE)
    monkeypatch.setattr(logit_scales, "GRANITE", tuple(t for t in logit_scales.GRANITE if t != "granite"))
    runner = load_hf_runner(str(folder))  # it opens
    sentence = runner.facts.notes[READOUT_REFUSED]
    assert sentence.startswith("granite: the logits this app reads through the model's final norm and unembedding "
                               "differ from the model's own by ")
    factor = float(re.search(r"the model's own are ([\d.]+) × these", sentence).group(1))
    assert factor == pytest.approx(1 / GRANITE["logits_scaling"], rel=1e-3)  # Granite divides its logits by it
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()  # the model's own, by transformers
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.blocks.*",)))
    stream, logits = last_block_and_logits(model, trace.ids)
    lm_head = model.get_output_embeddings()
    assert lm_head is not None  # a causal LM's
    with torch.inference_mode():
        plain = lm_head(model.model.norm(stream))  # what the table's readout gives
    np.testing.assert_allclose(logits.numpy(), plain.numpy() * factor, atol=1e-5)
    assert unembedding_for(runner) == sentence
    for refused in (lambda: logit_map(runner, [4]), lambda: logit_lens(trace, runner),
                    lambda: likeliest(runner, runner.run(TEXT, options=attribution_options(runner)), -1),
                    lambda: attribute(runner, runner.run(TEXT, options=attribution_options(runner)), " fox")):
        with pytest.raises(UserError, match=re.escape(sentence)):
            refused()
    assert residual(trace, measure="block").data  # the rest of the app works


def test_its_card_says_nothing_where_the_table_knows_it(tmp_path) -> None:
    runner = load_hf_runner(str(build_decoder("granite", tmp_path / "granite", **GRANITE)))
    assert READOUT_REFUSED not in runner.facts.notes and not isinstance(unembedding_for(runner), str)


def test_an_unembedding_that_reads_something_else_is_refused(tmp_path) -> None:
    """A pre-norm OPT whose word embeddings are 16 wide, projected into the stream's 32 and out again before lm_head:
    the readout knows no projection out (before, the logit lens failed on a shape error)."""
    folder = build_decoder("opt", tmp_path / "opt", **(DECODER_TYPES["opt"] | {"word_embed_proj_dim": 16}))
    runner = load_hf_runner(str(folder))
    assert runner.facts.notes[READOUT_REFUSED].startswith(
        "opt: its unembedding reads vectors of 16 numbers, and its stream has 32")
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.*.hook_resid_post",)))
    with pytest.raises(UserError, match="its unembedding reads vectors of 16 numbers"):
        logit_lens(trace, runner)


def _folders(root: Path) -> dict[str, Path]:
    """Every tiny model type of the suite with an unembedding, each in its folder (tiny_hf's families and types, the
    latent, hybrid, sink and chunked ones, and those whose configs scale their logits)."""
    built = {f"{t} (family)": build(t, root / f"family-{t}") for t in FAMILIES if t != "bert"}
    built |= {t: build_type(t, root / t) for t in (*DECODER_TYPES, *SEQ2SEQ_TYPES, *MLA_TYPES)}
    built |= {f"{t} (hybrid)": build_hybrid(t, root / f"hybrid-{t}") for t in HYBRID_TYPES}
    built |= {"gpt_oss": build_gpt_oss(root / "gpt_oss"), "llama4_text": build_llama4(root / "llama4")}
    return built | {f"{t} (scaled)": build_decoder(t, root / f"scaled-{t}", **SCALED[t]) for t in SCALED}


@pytest.mark.slow
def test_every_tiny_models_readout_is_its_own(tmp_path) -> None:
    """Each opens with its readout, which the guard held (the hook it reads is offered: the check was made)."""
    refused, unchecked = {}, []
    for name, folder in _folders(tmp_path).items():
        runner = load_hf_runner(str(folder))
        if READOUT_REFUSED in runner.facts.notes:
            refused[name] = runner.facts.notes[READOUT_REFUSED]
            continue
        assert not isinstance(unembedding_for(runner), str), name
        if readout_tap(runner) is None:
            unchecked.append(name)
    assert refused == {} and unchecked == []
