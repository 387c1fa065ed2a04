"""The full list of hook names of each from-scratch model family, pinned."""

from model.config import TransformerConfig
from model.transformer import build_model

ATTN = ["hook_q", "hook_k", "hook_v", "hook_scores", "hook_pattern", "hook_z"]
MLP = ["mlp.hook_pre", "mlp.hook_post"]
STACK = ["hook_embed", "hook_pos_embed", "hook_resid_final"]


def _layer(prefix: str, cross: bool) -> list[str]:
    names = [f"{prefix}.attn.{h}" for h in ATTN]
    if cross:
        names += [f"{prefix}.cross_attn.{h}" for h in ATTN]
    names += [f"{prefix}.{h}" for h in MLP]
    names += [f"{prefix}.hook_resid_pre", f"{prefix}.hook_attn_out", f"{prefix}.hook_resid_mid"]
    if cross:
        names += [f"{prefix}.hook_cross_attn_out", f"{prefix}.hook_resid_mid_cross"]
    names += [f"{prefix}.hook_mlp_out", f"{prefix}.hook_resid_post"]
    return names


def test_encoder_decoder_hook_names() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=10))
    expected = [
        *_layer("encoder.0", cross=False), *_layer("encoder.1", cross=False),
        *[f"encoder.{h}" for h in STACK],
        *_layer("decoder.0", cross=True), *_layer("decoder.1", cross=True),
        *[f"decoder.{h}" for h in STACK],
    ]
    assert list(model.hook_points) == expected
    assert len(expected) == 74
    assert "decoder.1.cross_attn.hook_pattern" in model.hook_points
    assert all(point.name == name for name, point in model.hook_points.items())


def test_decoder_only_hook_names() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=10, kind="decoder"))
    expected = [*(name for i in range(4) for name in _layer(f"decoder.{i}", cross=False)),
                *[f"decoder.{h}" for h in STACK]]
    assert list(model.hook_points) == expected
    assert not any(name.startswith("encoder") for name in model.hook_points)
