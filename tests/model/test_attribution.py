"""Direct logit attribution (model/inspect/attribution.py): each head's and each MLP's share equal to TransformerLens
3.9's own (`stack_head_results` and `decompose_resid` with `apply_ln`) on the same random weights, and the parts adding
up to the model's own logit difference in every kind of stack: pre- and post-norm, LayerNorm and RMSNorm, parallel
blocks, norms after attention, latent attention, encoder-decoders' decoders with cross-attention, and the
from-scratch models (hybrids: tests/model/test_hybrids.py)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import attention_atlas as aa
from attention_atlas import attribute_command
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import attribute, attribution_options
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import build, build_type
from tests.transformer_lens_reference import randomise_norms, reference_of

TEXT = "the quick brown fox"


def two_words(runner) -> tuple[str, str]:
    """Two words of the tiny vocabulary that are one token each (with their leading space)."""
    tokenizer = runner.text.tokenizer
    words = [w for w in (" fox", " dog", " cat", " the", " quick", " brown")
             if len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]
    return words[0], words[1]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_every_heads_and_mlps_share_is_transformer_lens_own(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    answer, wrong = two_words(runner)
    trace = runner.run(TEXT, options=attribution_options(runner))
    ours = attribute(runner, trace, answer, wrong)

    reference = reference_of(family, runner.model).eval()
    _, cache = reference.run_with_cache(torch.tensor([trace.ids]))
    a, b = (runner.text.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (answer, wrong))
    direction = reference.ln_final.w * (reference.W_U[:, a] - reference.W_U[:, b])  # the norm's weight not folded in
    heads = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True)[:, 0] @ direction  # (layers x heads,)
    mlp = cache.decompose_resid(mode="mlp", apply_ln=True, pos_slice=-1, incl_embeds=False)[:, 0] @ direction
    np.testing.assert_allclose(ours.heads, heads.detach().numpy().reshape(ours.heads.shape), atol=2e-5)
    np.testing.assert_allclose(ours.mlp, mlp.detach().numpy(), atol=2e-5)
    logits = reference(torch.tensor([trace.ids]))[0, -1]
    assert ours.model_logit == pytest.approx(float(logits[a] - logits[b]), abs=2e-5)
    assert ours.total == pytest.approx(ours.model_logit, abs=2e-5)  # the parts add up
    assert np.abs(ours.heads).max() > 1e-3  # the heads do write in that direction: a comparison of zeros proves nothing


ADDS_UP = ["gpt_neox", "phi", "olmo", "cohere", "opt", "qwen3", "mixtral", "gemma", "bloom", "falcon",
           "gemma3_text", "olmo2", "deepseek_v2"]
# parallel blocks, norms without weights or bias, learned positions, query/key norms, experts, embeddings scaled, ALiBi
# and sublayers that add the residual themselves, a grouped fused projection, norms after attention and the MLP (each
# head's write through its layer's, frozen), multi-head latent attention


@pytest.mark.parametrize("model_type", ADDS_UP)
def test_the_parts_add_up_to_the_models_logit_difference(tmp_path, model_type: str) -> None:
    runner = load_hf_runner(str(build_type(model_type, tmp_path / "model")))
    randomise_norms(runner.model)
    answer, wrong = two_words(runner)
    found = attribute(runner, runner.run(TEXT, options=attribution_options(runner)), answer, wrong)
    assert abs(found.model_logit) > 1e-4
    assert found.total == pytest.approx(found.model_logit, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_an_encoder_decoders_decoder_with_its_cross_attention(tmp_path, family: str) -> None:
    """T5 (pre-norm RMSNorm, its output scaled by 1/sqrt(d_model)) and BART (post-norm, a norm on the embeddings and
    a final_logits_bias): the decoder's last position, the cross-attention's heads a part of their own."""
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    with torch.no_grad():
        if family == "bart":
            runner.model.final_logits_bias.uniform_(-1, 1)
    answer, wrong = two_words(runner)
    found = attribute(runner, runner.run(TEXT, "the cat sat", attribution_options(runner)), answer, wrong)
    assert found.cross_heads is not None and found.cross_heads.shape == found.heads.shape
    assert np.abs(found.cross_heads).max() > 1e-4
    assert found.total == pytest.approx(found.model_logit, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("model_id", ["toy-gpt-date", "toy-date"])
def test_the_from_scratch_post_norm_models(model_id: str) -> None:
    """The shipped toys are post-norm: every block's norms lie on the way from a part to the output, each frozen at
    its scale in this run; one logit alone (no wrong answer) at every position."""
    runner = load_runner(model_id)
    trace = runner.run("march 3 2021", None, attribution_options(runner))
    length = len(trace.target_ids if runner.facts.kind == "encoder-decoder" else trace.ids)
    two, one = (runner.toy.tokenizer.encode(c, max_chars=1)[0] for c in "21")
    for position in range(length):
        alone = attribute(runner, trace, "2", position=position)
        assert alone.total == pytest.approx(alone.model_logit, rel=1e-4, abs=1e-4), position
        found = attribute(runner, trace, "2", "1", position=position)
        log_probs = trace.outputs["log_probs"][position]  # the run's own: a difference of logits is one of these
        assert found.model_logit == pytest.approx(float(log_probs[two] - log_probs[one]), abs=1e-4), position
        assert found.total == pytest.approx(found.model_logit, rel=1e-4, abs=1e-4), position


def test_heads_that_do_not_add_up_to_what_attention_writes_are_refused(tmp_path) -> None:
    """Gemma 2 normalises what attention writes before it joins the stream: its heads' writes through that norm (its
    scale frozen) add up to it; changed after the run, what layer 0 wrote is no longer theirs, and no head's share is
    told."""
    runner = load_hf_runner(str(build_type("gemma2", tmp_path / "model")))
    answer, wrong = two_words(runner)
    trace = runner.run(TEXT, options=attribution_options(runner))
    attribute(runner, trace, answer, wrong)
    written = trace["decoder.0.hook_attn_out"] * 1.5
    changed = dataclasses.replace(trace, captured={**trace.captured, "decoder.0.hook_attn_out": written})
    with pytest.raises(UserError, match=r"heads of decoder\.0\.attn do not add up"):
        attribute(runner, changed, answer, wrong)


def test_bad_input_gets_a_sentence(tmp_path) -> None:
    runner = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    trace = runner.run(TEXT, options=attribution_options(runner))
    with pytest.raises(UserError, match=r"one token of .*; it is 'the' \+ 'fox'"):
        attribute(runner, trace, " the fox")
    with pytest.raises(UserError, match="no token at all"):
        attribute(runner, trace, "")
    with pytest.raises(UserError, match="outside the sequence of 4 tokens"):
        attribute(runner, trace, " fox", position=9)
    encoder = load_hf_runner(str(build("bert", tmp_path / "bert")))
    with pytest.raises(UserError, match="is an encoder"):
        attribute(encoder, encoder.run(TEXT), " fox")


def test_the_api_and_the_command_line(tmp_path, capsys) -> None:
    found = aa.load("toy-gpt-date").attribute("march 3 2021", "</s>", "3")
    assert found.total == pytest.approx(found.model_logit, rel=1e-4) and found.token == "3"
    site, layer, head, share = found.ranked()[0]
    assert share == found.heads[layer, head] and abs(share) == np.abs(found.heads).max() and site == "decoder.attn"
    out = tmp_path / "shares.json"
    assert attribute_command.main(["--model", "toy-gpt-date", "--text", "march 3 2021", "--answer", "</s>", "--wrong",
                                   "3", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model_logit"] == pytest.approx(found.model_logit) and len(summary["top_heads"]) == 10
    assert np.allclose(json.loads(out.read_text())["heads"], found.heads)
    assert attribute_command.main(["--model", "toy-gpt-date", "--text", "march 3 2021", "--answer", "20"]) == 2
    assert "must be one token" in capsys.readouterr().err
