"""The guard (model/hf/proof.py): a model whose attention, as the app computes it, differs from transformers' own eager
attention is refused when it opens, with a sentence naming the layer; the models whose maps agree open unchanged
(tests/model/test_model_types.py opens every other type through the same guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from attention_atlas.model.hf import heads
from attention_atlas.model.hf.heads import ATTENTION
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.own_attention import ROUTED
from attention_atlas.model.hf.proof import AttentionNotProven
from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer, build_type

# Types whose attention the app computed wrongly without a word. GPT-OSS's sinks and Llama 4's chunks, once wrong
# too, are proven now (tests/model/test_sinks.py and tests/model/test_chunked.py load them through the guard).
WRONG_TYPES: dict[str, dict[str, object]] = {}


def _build(model_type: str, folder: Path) -> Path:
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **(SHARED | WRONG_TYPES[model_type]))
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
    return folder


@pytest.mark.parametrize("model_type", WRONG_TYPES)
def test_a_type_whose_attention_the_app_gets_wrong_is_refused(tmp_path, model_type: str) -> None:
    with pytest.raises(AttentionNotProven, match=rf"^{model_type}: the attention this app computes differs from the "
                                                 r"model's own .* by 0\.\d+ in layer 0 of decoder\.attn"):
        load_hf_runner(str(_build(model_type, tmp_path / model_type)))


def test_attention_made_wrong_on_purpose_is_refused(tmp_path, monkeypatch) -> None:
    """A scale of 1.5 times the model's in the app's attention (a plausible bug): the map would look fine."""
    folder = build_type("qwen2", tmp_path / "qwen2")
    load_hf_runner(str(folder))  # as it is: proven
    scale = heads._scale
    monkeypatch.setattr(heads, "_scale", lambda query, scaling: 1.5 * scale(query, scaling))
    with pytest.raises(AttentionNotProven, match=r"in layer 0 of decoder\.attn"):
        load_hf_runner(str(folder))


@pytest.mark.parametrize("model_type", ["llama", "bloom"])
def test_the_proof_leaves_the_model_as_the_app_runs_it(tmp_path, model_type: str) -> None:
    """After the eager reference, the model computes attention with the app's function again (loaded with it, or,
    for a family with its own code, its modules routed through it), so runs report what the pages draw."""
    folder = build_type("mistral" if model_type == "llama" else model_type, tmp_path / model_type)
    runner = load_hf_runner(str(folder))
    routed = [m for m in runner.model.modules() if ROUTED in m.__dict__]
    if model_type == "bloom":
        assert routed and all(m.forward.__func__ is not type(m).forward for m in routed)
        assert runner.model.config._attn_implementation == "eager"
    else:
        assert not routed and runner.model.config._attn_implementation == ATTENTION
    trace = runner.run("the quick brown fox")
    assert trace.pattern_source("decoder.attn", 0) is not None
