"""The readout is the model's own: lm_head after the final norm with every scaling its forward pass applies on the way
(model/inspect/logit_scales.py): the logit lens's and the likeliest answers' logits, and the rows direct logit
attribution reads, equal transformers' logits on tiny random models whose configs set that scaling to something
other than 1 (Falcon-H1's lm_head_multiplier, the Granite families' logits_scaling, Cohere's logit_scale, ...)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.logit_scales import head_scales
from attention_atlas.model.inspect.readout import logit_map, unembedding_for
from tests.last_block import last_block_and_logits
from tests.tiny_hf import LM_SPECIALS, SHARED, WORDS, _tokenizer
from tests.tiny_hybrids import HYBRID_TYPES

TEXT = "the quick brown fox jumps over the lazy dog"
EXPERTS: dict[str, object] = {"num_local_experts": 4, "num_experts_per_tok": 2}
SCALED: dict[str, dict[str, object]] = {  # model type -> its config's settings beyond tiny_hf.SHARED
    "falcon_h1": HYBRID_TYPES["falcon_h1"] | {"lm_head_multiplier": 0.25},
    "granitemoehybrid": {"num_hidden_layers": 4} | HYBRID_TYPES["granitemoehybrid"] | {"logits_scaling": 4.0},
    "granite": {"logits_scaling": 4.0},
    "granitemoe": EXPERTS | {"logits_scaling": 4.0},
    "granitemoeshared": EXPERTS | {"shared_intermediate_size": 32, "logits_scaling": 4.0},
    "cohere": {"logit_scale": 0.25},
    "cohere2": {"head_dim": 8, "logit_scale": 0.25},
    "hyperclovax": {"logits_scaling": 0.3},  # a multiplier here
    "minicpm3": {"kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                 "v_head_dim": 6, "num_key_value_heads": 4, "dim_model_base": 8},  # lm_head's input / (32 / 8)
}


@pytest.fixture(scope="module")
def opened() -> dict:
    """model type -> (the model as transformers runs it, the app's runner), each built on first use."""
    return {}


def open_scaled(opened: dict, model_type: str, root: Path) -> tuple[transformers.PreTrainedModel, object]:
    if model_type not in opened:
        vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
        config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **(SHARED | SCALED[model_type]))
        torch.manual_seed(0)
        folder = root / model_type
        transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
        _tokenizer(LM_SPECIALS, "<s> $A").save_pretrained(folder)
        opened[model_type] = (transformers.AutoModelForCausalLM.from_pretrained(folder).eval(),
                              load_hf_runner(str(folder)))
    return opened[model_type]


@pytest.mark.parametrize("model_type", SCALED)
def test_the_readout_is_the_models_own(opened, tmp_path_factory, model_type: str) -> None:
    """The readout of the stream after the last block, at every position, is the model's own logits; lm_head after
    the final norm alone is not (the scaling matters)."""
    model, runner = open_scaled(opened, model_type, tmp_path_factory.mktemp("scaled"))
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.hook_resid_final",)))
    stream, logits = last_block_and_logits(model, trace.ids)
    lm_head = model.get_output_embeddings()
    assert lm_head is not None  # a causal LM's
    with torch.inference_mode():
        plain = lm_head(torch.from_numpy(trace.captured["decoder.hook_resid_final"]))
    assert head_scales(model.config) != (1.0, 1.0)
    assert not np.allclose(plain.numpy(), logits.numpy(), atol=1e-3)  # lm_head after the final norm alone
    np.testing.assert_allclose(unembedding_for(runner).readout(stream).numpy(), logits.numpy(), atol=1e-5)


@pytest.mark.parametrize("model_type", SCALED)
def test_the_rows_of_direct_logit_attribution_are_the_models_own(opened, tmp_path_factory, model_type: str) -> None:
    """Some tokens' logits as the affine map of the final norm's output: the model's own logits of those tokens."""
    model, runner = open_scaled(opened, model_type, tmp_path_factory.mktemp("scaled"))
    trace = runner.run(TEXT, options=RunOptions(hooks=("decoder.hook_resid_final",)))
    ids = [int(i) for i in trace.ids[:4]]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([trace.ids]), use_cache=False).logits[0, :, ids]  # (pos, 4)
    rows = logit_map(runner, ids)
    np.testing.assert_allclose(trace.captured["decoder.hook_resid_final"] @ rows.directions.T + rows.constants,
                               logits.numpy(), atol=1e-5)
