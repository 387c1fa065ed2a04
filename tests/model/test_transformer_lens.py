"""Every hook name means what it means in TransformerLens 3.9: the same weights loaded into its HookedTransformer,
HookedEncoder or HookedEncoderDecoder (its own weight conversions) and run on the same tokens give the same value
under the same name, for every hook both offer. GPT-2 (LayerNorm, a plain MLP, learned positions), Llama (RMSNorm, a
gated MLP, rotary positions, grouped key/value heads) and BERT (post-norm, an encoder); GPT-NeoX, OPT, Phi-3, Qwen2,
Qwen3, Mistral, Mixtral, OLMoE, GPT-Neo and BLOOM (attention in their own code), and T5 (an encoder-decoder), as
TransformerLens loads them from a folder. Tiny and random, their norms' weights made unlike 1 and 0 (where the
meanings of `hook_normalized` before and after the weights agree)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformer_lens import HookedEncoder, HookedEncoderDecoder, HookedTransformer  # make installs 3.9
from transformer_lens.loading_from_pretrained import get_pretrained_model_config, get_pretrained_state_dict

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hf import build, build_type
from tests.tiny_sinks import build_gpt_oss
from tests.transformer_lens_reference import randomise_norms, reference_of

PER_HEAD = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k")  # ours (heads, pos, d_head)
FLATTENED = ("hook_expert_weights", "hook_expert_indices")  # its MoE records them (batch x pos, ...): one text's
OURS_ONLY = {"hook_resid_final"}  # the stack's output after its final norm: TransformerLens names no such hook
TEXT = "the quick brown fox"


def _compare(runner, reference: HookedTransformer | HookedEncoder, encoder: bool = False,
             skip: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """Every hook of ours on TEXT (but the kinds in `skip`) against the reference's value of the same name (2e-6);
    the kinds compared."""
    ids = runner.text.encode(TEXT)
    _, cache = reference.eval().run_with_cache(torch.tensor([ids]))
    trace = runner.run(TEXT, options=RunOptions(hooks=("*",)))
    patterns = {name: source.pattern(dtype=np.float32) for name, source in trace.pattern_sources.items()}
    compared = set()
    for name, value in {**trace.captured, **patterns}.items():
        rest = name.split(".")[1:]  # after the stack
        if rest[-1] in OURS_ONLY or rest[-1] in skip:
            continue
        stack_hook = f"embed.{'.'.join(rest)}" if encoder else ".".join(rest)  # HookedEncoder's embed
        theirs = f"blocks.{'.'.join(rest)}" if rest[0].isdigit() else stack_hook
        expected = cache[theirs].numpy() if rest[-1] in FLATTENED else cache[theirs][0].numpy()  # batch removed
        if rest[-1] in PER_HEAD:
            expected = expected.transpose(1, 0, 2)  # (pos, heads, d_head) -> ours (heads, pos, d_head)
        seen = np.isfinite(expected)  # its hook_attn_scores hold -inf where the causal mask hides a key (ours: before)
        np.testing.assert_allclose(np.asarray(value, np.float32)[seen], expected[seen], atol=2e-6, err_msg=name)
        compared.add(rest[-1])
    return compared


EVERY_BLOCK = {"hook_normalized", "hook_scale", "hook_pattern", "hook_attn_scores", "hook_resid_post", "hook_embed",
               "hook_mlp_out", "hook_z", "hook_q", "hook_k", "hook_v", "hook_attn_out", "hook_pre", "hook_post"}


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_every_hook_is_transformer_lens_own(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    compared = _compare(runner, reference_of(family, runner.model), encoder=family == "bert")
    assert EVERY_BLOCK | {"hook_resid_mid"} <= compared
    assert family != "llama" or {"hook_rot_q", "hook_rot_k", "hook_pre_linear"} <= compared
    assert family != "bert" or {"hook_normalized_resid_post", "hook_pos_embed"} <= compared


OTHER_FAMILIES = {  # model type -> hook kinds beyond EVERY_BLOCK it must match
    "gpt_neox": {"hook_rot_q", "hook_rot_k"},  # parallel blocks, a fused projection, partial rotary
    "opt": {"hook_resid_mid", "hook_pos_embed"},  # queries scaled when projected, flattened positions in the MLP
    "phi3": {"hook_resid_mid", "hook_rot_q", "hook_pre_linear"},  # fused projections, a sliding window
    "qwen2": {"hook_resid_mid", "hook_rot_q", "hook_pre_linear"},
    "qwen3": {"hook_resid_mid", "hook_rot_q", "hook_pre_linear"},  # query and key norms
    "mistral": {"hook_resid_mid", "hook_rot_q", "hook_pre_linear"},  # a sliding window
    "mixtral": {"hook_resid_mid", "hook_rot_q", "hook_expert_weights", "hook_expert_indices"},  # a mixture of
    # experts: the router's choice
    "olmoe": {"hook_resid_mid", "hook_rot_q", "hook_expert_weights", "hook_expert_indices"},
    "gpt_neo": {"hook_resid_mid", "hook_pos_embed"},  # attention in its own code: unscaled, local layers
    "bloom": {"hook_resid_mid"},  # attention in its own code: ALiBi; normalised embeddings
}


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_the_other_families_hooks_are_transformer_lens_own(tmp_path, model_type: str) -> None:
    """Families read by model/hf/discovery.py, each in TransformerLens's HookedTransformer through its own loader of a
    local folder (its config conversion and weight conversion of the same weights). Not here: the Gemma and OLMo
    families, which TransformerLens 3.9 recognises by hub name only, and GPT-J and Phi, whose conversion fails on
    transformers 5's configs."""
    folder = build_type(model_type, tmp_path / "model")  # a neutral name: TransformerLens reads families from names
    runner = load_hf_runner(str(folder))
    randomise_norms(runner.model)
    config = get_pretrained_model_config(str(folder), fold_ln=False, device="cpu", default_prepend_bos=False)
    reference = HookedTransformer(config)
    reference.load_state_dict(get_pretrained_state_dict(str(folder), config, hf_model=runner.model), strict=False)
    expected = EVERY_BLOCK - ({"hook_pre", "hook_post"} if "hook_expert_indices" in OTHER_FAMILIES[model_type] else
                              set())  # a mixture of experts has no one hidden layer
    assert expected | OTHER_FAMILIES[model_type] <= _compare(runner, reference)


def _t5_name(ours: str) -> str:
    """Our T5 hook name as TransformerLens's HookedEncoderDecoder names it: the decoder's cross-attention norm is
    its ln2 and the MLP's its ln3 (ours: ln_cross, ln2, as in every encoder-decoder here); the stacks' final norms
    are encoder_final_ln and decoder_final_ln; the encoder's embedding is hook_embed."""
    stack, rest = ours.split(".", 1)
    if rest.split(".")[0].isdigit():
        if stack == "decoder":
            return ours.replace(".ln_cross.", ".ln2.") if ".ln_cross." in ours else ours.replace(".ln2.", ".ln3.")
        return ours
    return {"ln_final.hook_scale": f"{stack}_final_ln.hook_scale", "ln_final.hook_normalized":
            f"{stack}_final_ln.hook_normalized", "hook_embed": "hook_embed" if stack == "encoder" else ""}.get(rest, "")


def test_t5_hooks_are_transformer_lens_own(tmp_path) -> None:
    """T5 in TransformerLens's HookedEncoderDecoder (its own loader of the folder): every hook of both stacks and the
    cross-attention, the relative position bias in the scores included, under TransformerLens's names (_t5_name)."""
    folder = build("t5", tmp_path / "model", n_positions=64)  # TransformerLens reads its context length there
    runner = load_hf_runner(str(folder))
    randomise_norms(runner.model)
    config = get_pretrained_model_config(str(folder), fold_ln=False, device="cpu", default_prepend_bos=False)
    reference = HookedEncoderDecoder(config)
    reference.load_state_dict(get_pretrained_state_dict(str(folder), config, hf_model=runner.model), strict=False)
    trace = runner.run(TEXT, "the cat sat", options=RunOptions(hooks=("*",)))
    _, cache = reference.eval().run_with_cache(torch.tensor([trace.ids]),
                                               decoder_input=torch.tensor([trace.target_ids]))
    patterns = {name: source.pattern(dtype=np.float32) for name, source in trace.pattern_sources.items()}
    compared = set()
    for name, value in {**trace.captured, **patterns}.items():
        theirs = _t5_name(name)
        if not theirs:  # the decoder's embedding and each stack's output: TransformerLens has no such hook
            continue
        expected = cache[theirs][0].numpy()
        if name.split(".")[-1] in PER_HEAD:
            expected = expected.transpose(1, 0, 2)
        seen = np.isfinite(expected)  # T5's unscaled scores are larger: float32 sums differ by a few ulps more
        np.testing.assert_allclose(np.asarray(value, np.float32)[seen], expected[seen], atol=5e-6, rtol=1e-5,
                                   err_msg=name)
        compared.add(name.split(".", 2)[-1] if name.split(".")[1].isdigit() else name)
    assert {"attn.hook_pattern", "cross_attn.hook_pattern", "attn.hook_attn_scores", "ln_cross.hook_normalized",
            "ln2.hook_scale", "hook_resid_mid_cross", "mlp.hook_post", "encoder.ln_final.hook_normalized"} <= compared


def test_gpt_oss_hooks_are_transformer_lens_own_sinks_included(tmp_path) -> None:
    """GPT-OSS, which TransformerLens 3.9 supports (the only one of the 2026 types it does): its attention with the
    sink logit in every row's softmax, scores, queries and keys after rotation, every block's sums. Not compared:
    `mlp.hook_expert_weights`, which TransformerLens records as the softmax of the top k logits (zeros elsewhere)
    and ours as the router's softmax over every expert (docs/hooks.md)."""
    folder = build_gpt_oss(tmp_path / "model")
    runner = load_hf_runner(str(folder))
    randomise_norms(runner.model)
    config = get_pretrained_model_config(str(folder), fold_ln=False, device="cpu", default_prepend_bos=False)
    reference = HookedTransformer(config)
    reference.load_state_dict(get_pretrained_state_dict(str(folder), config, hf_model=runner.model), strict=False)
    compared = _compare(runner, reference, skip={"hook_expert_weights"})
    assert (EVERY_BLOCK - {"hook_pre", "hook_post"}) | {"hook_rot_q", "hook_rot_k", "hook_expert_indices"} <= compared
