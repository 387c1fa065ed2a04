"""Language models with no attention at all (state-space: Mamba, Mamba-2, Falcon-Mamba; recurrent: RWKV, xLSTM) are
refused with the true sentence, before any weight is read: there is no attention for the app to show."""

from __future__ import annotations

import re

import pytest
import torch
import transformers

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.families import NO_ATTENTION, kind_of
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hf import LM_SPECIALS, WORDS


def _sentence(model_type: str) -> str:
    return re.escape(f"{model_type} has no attention layers: nothing for this app to show.")


def test_a_tiny_mamba_is_refused_with_the_true_sentence(tmp_path) -> None:
    """A whole tiny Mamba (weights and config): refused for what it is, not as attention computed in its own code."""
    config = transformers.MambaConfig(vocab_size=len(LM_SPECIALS) + len(WORDS), hidden_size=32, state_size=4,
                                      num_hidden_layers=2, expand=2, conv_kernel=2)
    torch.manual_seed(0)
    transformers.MambaForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=_sentence("mamba")):
        load_hf_runner(str(tmp_path))


@pytest.mark.parametrize("model_type", NO_ATTENTION)
def test_every_attention_free_type_is_refused_from_its_config(tmp_path, model_type: str) -> None:
    transformers.AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=_sentence(model_type)):
        load_hf_runner(str(tmp_path))
    with pytest.raises(UserError, match=_sentence(model_type)):
        kind_of(model_type)
