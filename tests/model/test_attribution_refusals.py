"""What direct logit attribution refuses, each in a sentence, rather than drawing a wrong split or raising a bug's
error: a model whose layout offers no hook the split reads (a post-norm OPT with a projected embedding, OPT-350m's
layout), a run without the scales of the norms on the way to the output (the parts summed to -3.23 against the
model's +0.03 on toy-gpt-date before), and parts that do not add up to the model's own logit. The heads' sum check is
one helper, one tolerance, for the attribution and the contribution graph; the model card names OPT-350m's layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect import attribution, stream_walk
from attention_atlas.model.inspect.attribution import attribute, attribution_options, likeliest
from attention_atlas.model.inspect.contributions import contribution_graph, contribution_options
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import DECODER_TYPES, LM_SPECIALS, SHARED, WORDS, _tokenizer, build, build_type

TEXT = "the quick brown fox"


def build_post_norm_opt(folder: Path) -> Path:
    """A tiny random OPT laid out as OPT-350m: a norm after each residual sum (do_layer_norm_before=False), no final
    norm, and word embeddings of 16 projected in and out of the stream's 32."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.OPTConfig(vocab_size=vocab, **(SHARED | DECODER_TYPES["opt"]
                                                         | {"word_embed_proj_dim": 16, "do_layer_norm_before": False}))
    transformers.OPTForCausalLM(config).eval().save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def post_norm_opt(tmp_path_factory):
    return load_hf_runner(str(build_post_norm_opt(tmp_path_factory.mktemp("opt350"))))


def test_a_post_norm_opt_is_refused_naming_the_hooks_it_lacks(post_norm_opt) -> None:
    """Before: KeyError 'decoder.1.hook_mlp_out' (the page catches only a UserError)."""
    trace = post_norm_opt.run(TEXT, options=attribution_options(post_norm_opt))
    with pytest.raises(UserError, match=r"has no .*decoder\.\*\.hook_attn_out, decoder\.\*\.hook_mlp_out.* cannot be "
                                        "split into parts"):
        attribute(post_norm_opt, trace, " fox", " dog")
    with pytest.raises(UserError, match=r"has no decoder\.\*\.hook_normalized_resid_post here"):  # read first
        likeliest(post_norm_opt, trace, -1)


def test_the_model_card_names_opt_350ms_layout_post_norm(post_norm_opt, tmp_path) -> None:
    """A norm after each residual sum is post-norm (the original Transformer's, BERT's); OLMo 2's norm of each
    sublayer's output, the stream never normalised, keeps its own words."""
    assert post_norm_opt.facts.norm.startswith("post-norm: a norm after each residual sum")
    assert "sublayer" not in post_norm_opt.facts.norm  # the Step-through reads "sublayer" as OLMo 2's layout
    olmo2 = load_hf_runner(str(build_type("olmo2", tmp_path / "olmo2")))
    assert olmo2.facts.norm == "a norm on each sublayer's output, none before (RMSNorm)"


def test_a_run_without_the_norms_scales_is_refused_not_summed_wrong() -> None:
    """toy-gpt-date is post-norm: without its norms' scales the walk crossed none of them and its parts summed to
    -3.23 against the model's +0.03, with no error."""
    runner = load_runner("toy-gpt-date")
    hooks = tuple(hook for hook in attribution_options(runner).hooks if not hook.endswith("hook_scale"))
    trace = runner.run("march 3 2021", None, RunOptions(hooks=hooks))
    with pytest.raises(UserError, match=r"did not record decoder\.\*\.ln1\.hook_scale, decoder\.\*\.ln2\.hook_scale"):
        attribute(runner, trace, "2", "1")
    whole = attribute(runner, runner.run("march 3 2021", None, attribution_options(runner)), "2", "1")
    assert whole.total == pytest.approx(whole.model_logit, abs=1e-5)  # with them: the same question is answered


def test_parts_that_miss_the_models_logit_are_refused(monkeypatch) -> None:
    """A norm crossed with the wrong gain (as a split that does not know a part of the model would be): the parts no
    longer add up to the model's own logit, and the split is refused rather than drawn."""
    runner = load_runner("toy-gpt-date")
    trace = runner.run("march 3 2021", None, attribution_options(runner))
    affine = stream_walk.norm_affine
    monkeypatch.setattr(stream_walk, "norm_affine", lambda module: (affine(module)[0] * 1.1, affine(module)[1]))
    with pytest.raises(UserError, match=r"The parts add up to [-+]\d+\.\d{3}, but the model's own logit difference is "
                                        r"[-+]\d+\.\d{3}"):
        attribute(runner, trace, "2", "1")


def test_one_heads_sum_check_with_one_tolerance_serves_attribution_and_the_graph(tmp_path, monkeypatch) -> None:
    """`heads_add_up` refuses beyond SUM_TOLERANCE of the largest entry (at least 1); with that tolerance made 0 the
    rounding of float32 alone refuses both the attribution and the contribution graph of a plain GPT-2."""
    written = np.array([4.0, -2.0])
    assert attribution.heads_add_up(written + 0.9 * attribution.SUM_TOLERANCE * 4, written)
    assert not attribution.heads_add_up(written + 1.1 * attribution.SUM_TOLERANCE * 4, written)
    runner = load_hf_runner(str(build("gpt2", tmp_path / "gpt2")))
    hooks = (*attribution_options(runner).hooks, *contribution_options().hooks)
    trace = runner.run(TEXT, options=RunOptions(hooks=hooks))
    attribute(runner, trace, " fox", " dog")
    contribution_graph(runner, trace)
    monkeypatch.setattr(attribution, "SUM_TOLERANCE", 0.0)
    with pytest.raises(UserError, match="do not add up"):
        attribute(runner, trace, " fox", " dog")
    with pytest.raises(UserError, match="do not add up"):
        contribution_graph(runner, trace)
