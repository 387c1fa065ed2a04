"""The full list of hook names of each from-scratch model family, pinned, every one in the vocabulary, and
the residual hooks meaning what TransformerLens means (sums before any norm) in post-norm layers too."""

from dataclasses import replace

import pytest
import torch

from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.masks import causal_mask
from attention_atlas.model.core.trace.hook_names import in_vocabulary
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.transformer import build_model

ATTN = ["hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z"]
NORM = ["hook_scale", "hook_normalized"]
STACK = ["hook_embed", "hook_pos_embed", "hook_resid_final"]


def _layer(prefix: str, cross: bool, post_norm: bool = True) -> list[str]:
    names = [f"{prefix}.attn.{h}" for h in ATTN] + [f"{prefix}.ln1.{h}" for h in NORM]
    if cross:
        names += [f"{prefix}.cross_attn.{h}" for h in ATTN] + [f"{prefix}.ln_cross.{h}" for h in NORM]
    names += [f"{prefix}.mlp.hook_pre", f"{prefix}.mlp.hook_post"] + [f"{prefix}.ln2.{h}" for h in NORM]
    names += [f"{prefix}.hook_resid_pre", f"{prefix}.hook_attn_out", f"{prefix}.hook_resid_mid"]
    if cross:
        names += [f"{prefix}.hook_cross_attn_out", f"{prefix}.hook_resid_mid_cross"]
    names += [f"{prefix}.hook_mlp_out", f"{prefix}.hook_resid_post"]
    return names + ([f"{prefix}.hook_normalized_resid_post"] if post_norm else [])


def test_encoder_decoder_hook_names() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=10))
    expected = [
        *_layer("encoder.0", cross=False), *_layer("encoder.1", cross=False),
        *[f"encoder.{h}" for h in STACK],
        *_layer("decoder.0", cross=True), *_layer("decoder.1", cross=True),
        *[f"decoder.{h}" for h in STACK],
    ]
    assert list(model.hook_points) == expected
    assert len(expected) == 98
    assert all(point.name == name for name, point in model.hook_points.items())
    assert all(in_vocabulary(name) for name in expected)


def test_decoder_only_hook_names() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=10, kind="decoder"))
    expected = [*(name for i in range(4) for name in _layer(f"decoder.{i}", cross=False)),
                *[f"decoder.{h}" for h in STACK]]
    assert list(model.hook_points) == expected
    pre_norm = build_model(replace(TransformerConfig.toy(vocab_size=10, kind="decoder"), norm="pre"))
    assert "decoder.0.hook_normalized_resid_post" not in pre_norm.hook_points
    assert {"decoder.ln_final.hook_scale", "decoder.ln_final.hook_normalized"} <= set(pre_norm.hook_points)
    assert all(in_vocabulary(name) for name in pre_norm.hook_points)


def test_the_vocabulary_refuses_names_outside_it() -> None:
    assert in_vocabulary("decoder.3.cross_attn.hook_attn_scores") and in_vocabulary("encoder.hook_embed")
    assert not in_vocabulary("decoder.3.attn.hook_scores") and not in_vocabulary("decoder.hook_pattern")


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residual_hooks_are_the_sums_before_any_norm(norm: str) -> None:
    model = build_model(replace(TransformerConfig.toy(vocab_size=10, kind="decoder"), norm=norm)).eval()
    ids = torch.tensor([[1, 4, 5, 6, 7]])
    _, c = capture(model, model.hook_points, None, lambda: model(ids, causal_mask(5)))
    c = {k: torch.from_numpy(v) for k, v in c.items()}
    ln1, ln2 = model.decoder.layers[0].ln1, model.decoder.layers[0].ln2
    resid_pre = c["decoder.0.hook_resid_pre"]
    torch.testing.assert_close(c["decoder.0.hook_resid_mid"], resid_pre + c["decoder.0.hook_attn_out"])
    ln1_in = c["decoder.0.hook_resid_mid"] if norm == "post" else resid_pre
    ln1_out = torch.nn.functional.layer_norm(ln1_in, (64,), ln1.weight, ln1.bias, ln1.eps)
    mlp_in = ln1_out if norm == "post" else c["decoder.0.hook_resid_mid"]
    torch.testing.assert_close(c["decoder.0.hook_resid_post"], mlp_in + c["decoder.0.hook_mlp_out"])
    # as TransformerLens's LayerNorm: hook_normalized is the input centred and divided by hook_scale, before the
    # weight and bias; the norm's output is hook_normalized x weight + bias
    centred = ln1_in - ln1_in.mean(-1, keepdim=True)
    torch.testing.assert_close(c["decoder.0.ln1.hook_normalized"], centred / c["decoder.0.ln1.hook_scale"])
    torch.testing.assert_close(c["decoder.0.ln1.hook_normalized"] * ln1.weight + ln1.bias, ln1_out)
    layer_out = c["decoder.0.hook_normalized_resid_post"] if norm == "post" else c["decoder.0.hook_resid_post"]
    torch.testing.assert_close(layer_out, c["decoder.1.hook_resid_pre"])
    if norm == "post":
        expected = torch.nn.functional.layer_norm(c["decoder.0.hook_resid_post"], (64,), ln2.weight, ln2.bias, ln2.eps)
        torch.testing.assert_close(layer_out, expected)


def test_a_site_names_an_attention_location_and_its_hooks() -> None:
    from attention_atlas.model.core.trace.sites import Site

    cross = Site.of("decoder.cross_attn")
    assert (cross.stack, cross.is_cross, cross.name) == ("decoder", True, "decoder.cross_attn")
    assert cross.pattern_name(1) == "decoder.1.cross_attn.hook_pattern" and in_vocabulary(cross.pattern_name(1))
    assert Site.of("encoder.attn").label == "encoder self-attention" and not Site.of("encoder.attn").is_cross
