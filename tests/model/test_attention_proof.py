"""The guard (model/hf/proof.py): a model whose attention, as the app computes it, differs from transformers' own eager
attention is refused when it opens, with a sentence naming the layer; the models whose maps agree open unchanged
(tests/model/test_model_types.py opens every other type through the same guard). GPT-OSS's sinks and Llama 4's
chunks, which the app drew wrongly without a word, were refused by it until the app learned them
(the refusal is shown here with the sink dropped again)."""

from __future__ import annotations

import pytest

from attention_atlas.model.hf import heads
from attention_atlas.model.hf.heads import ATTENTION
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.own_attention import ROUTED
from attention_atlas.model.hf.proof import HOOKED_MARK, AttentionNotProven
from tests.tiny_hf import build_type
from tests.tiny_sinks import build_gpt_oss


def test_attention_made_wrong_on_purpose_is_refused(tmp_path, monkeypatch) -> None:
    """A scale of 1.5 times the model's in the app's attention (a plausible bug): the map would look fine."""
    folder = build_type("qwen2", tmp_path / "qwen2")
    load_hf_runner(str(folder))  # as it is: proven
    scale = heads._scale
    monkeypatch.setattr(heads, "_scale", lambda query, scaling: 1.5 * scale(query, scaling))
    with pytest.raises(AttentionNotProven, match=r"^qwen2: the attention this app computes differs from the model's "
                                                 r"own \(transformers' eager attention\) by 0\.\d+ in layer 0 of "
                                                 r"decoder\.attn, so its attention maps cannot be shown truthfully"):
        load_hf_runner(str(folder))


def test_a_sink_the_app_leaves_out_is_refused(tmp_path, monkeypatch) -> None:
    """GPT-OSS as the app ran it before it learned sinks (its attention function blind to `s_aux`): each row's
    softmax without the sink's logit, a map that would look plausible, refused naming the first layer."""
    attention = heads.attention
    monkeypatch.setattr(heads, "attention", lambda *args, s_aux=None, **kwargs: attention(*args, **kwargs))
    heads.register_attention()
    try:
        with pytest.raises(AttentionNotProven, match=r"^gpt_oss: .* by 0\.\d+ in layer 0 of decoder\.attn"):
            load_hf_runner(str(build_gpt_oss(tmp_path / "gpt_oss")))
    finally:
        monkeypatch.undo()
        heads.register_attention()


@pytest.mark.parametrize("model_type", ["llama", "bloom"])
def test_the_proof_leaves_the_model_as_the_app_runs_it(tmp_path, model_type: str) -> None:
    """After the eager reference, the model computes attention with the app's function again (loaded with it, or,
    for a family with its own code, its modules routed through it), so runs report what the pages draw, and carries
    none of the hooks transformers installs for output_attentions."""
    folder = build_type("mistral" if model_type == "llama" else model_type, tmp_path / model_type)
    runner = load_hf_runner(str(folder))
    routed = [m for m in runner.model.modules() if ROUTED in m.__dict__]
    if model_type == "bloom":
        assert routed and all(m.forward.__func__ is not type(m).forward for m in routed)
        assert runner.model.config._attn_implementation == "eager"
    else:
        assert not routed and runner.model.config._attn_implementation == ATTENTION
    assert not any(m._forward_hooks or HOOKED_MARK in vars(m) for m in runner.model.modules())  # eager's capture
    trace = runner.run("the quick brown fox")
    assert trace.pattern_source("decoder.attn", 0) is not None
