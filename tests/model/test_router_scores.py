"""A mixture of experts' router scores named by what the router computes (model/hf/router_scores.py), checked on
transformers' own router modules, tiny and random: Mixtral and Qwen-MoE take a softmax over every expert, GPT-OSS a
softmax over its top k logits (the same weights), DeepSeek-V3 a sigmoid, chosen with a correction bias. The scores
recorded are the router's own."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter
from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeTopKRouter

from attention_atlas.model.hf.router_scores import router_scores, router_scoring, scoring_of
from attention_atlas.model.hf.taps import router_weights

HIDDEN = 16


def _routed(router: nn.Module, tokens: int = 12) -> tuple[torch.Tensor, ...]:
    """The router with random weights (and bias) run on random hidden states: (logits, weights, indices)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in router.parameters():
            parameter.normal_(0.0, 0.5)
        if hasattr(router, "e_score_correction_bias"):
            router.e_score_correction_bias.normal_(0.0, 0.5)
        return router(torch.randn(tokens, HIDDEN))


def _mixtral(k: int = 2) -> nn.Module:
    return MixtralTopKRouter(transformers.MixtralConfig(hidden_size=HIDDEN, num_local_experts=4, num_experts_per_tok=k))


def _qwen(norm: bool) -> nn.Module:
    return Qwen2MoeTopKRouter(transformers.Qwen2MoeConfig(hidden_size=HIDDEN, num_experts=4, num_experts_per_tok=2,
                                                          norm_topk_prob=norm))


def _deepseek() -> nn.Module:
    return DeepseekV3TopkRouter(transformers.DeepseekV3Config(
        hidden_size=HIDDEN, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, norm_topk_prob=True,
        routed_scaling_factor=2.5))


def _gpt_oss() -> nn.Module:
    return GptOssTopKRouter(transformers.GptOssConfig(hidden_size=HIDDEN, num_local_experts=4, num_experts_per_tok=2))


@pytest.mark.parametrize("make", [_mixtral, lambda: _qwen(False), lambda: _qwen(True), _gpt_oss],
                         ids=["mixtral", "qwen2_moe", "qwen2_moe renormalised", "gpt_oss"])
def test_softmax_routers_scores_are_their_softmax_over_every_expert(make) -> None:
    routed = _routed(make())
    logits, weights, indices = routed
    scores = router_weights((), {}, routed)  # what the capture records
    assert router_scoring(*routed).name == "softmax"
    torch.testing.assert_close(scores, logits.float().softmax(-1))  # Mixtral's and Qwen-MoE's own router_probs
    chosen = scores.gather(-1, indices)  # the weights the router mixes by: these, or these renormalised over the k
    assert torch.allclose(weights.float(), chosen, atol=1e-6) or \
        torch.allclose(weights.float(), chosen / chosen.sum(-1, keepdim=True), atol=1e-6)
    assert scoring_of(scores.numpy()).value_name == "softmax probability"


def test_deepseek_v3s_router_scores_are_its_sigmoids_not_a_softmax() -> None:
    router = _deepseek()
    routed = _routed(router)
    logits, weights, indices = routed
    scores = router_weights((), {}, routed)  # what the capture records
    assert router_scoring(*routed).name == "sigmoid"
    torch.testing.assert_close(scores, logits.sigmoid())  # the router's own `scores`
    chosen = scores.gather(-1, indices)
    torch.testing.assert_close(weights, 2.5 * chosen / chosen.sum(-1, keepdim=True))  # renormalised, scaled
    picked_by_bias = (scores + router.e_score_correction_bias).topk(2, -1).indices
    assert not torch.equal(scores.topk(2, -1).indices.sort(-1).values, picked_by_bias.sort(-1).values)  # the bias
    # moves the choice here: why the view says the marked experts need not be the highest scored
    named = scoring_of(scores.numpy())
    assert named.name == "sigmoid" and "softmax" not in named.value_name + named.latex + named.words


def test_a_router_whose_weights_tell_nothing_is_named_by_its_logits() -> None:
    """One expert a token, renormalised: every weight is 1, whatever the scoring; the logits are shown as logits."""
    routed = _routed(_mixtral(k=1))
    assert router_scoring(*routed).name == "logits"
    scores = router_scores(routed)
    torch.testing.assert_close(scores, routed[0].float())
    assert scoring_of(scores.numpy()).name == "logits"
