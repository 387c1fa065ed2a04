"""The from-scratch encoder-decoder equals torch.nn.Transformer with the same weights."""

import pytest
import torch
from torch import nn

from attention_atlas.model.core.masks import causal_mask, combine, padding_mask
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.transformer import EncoderDecoder, build_model


def _copy_layer(ours, ref_layer, cross: bool) -> None:
    """Copy one of our layers' weights into a torch.nn.Transformer{Encoder,Decoder}Layer."""
    pairs = [
        (ref_layer.self_attn.in_proj_weight, ours.attn.in_proj.weight),
        (ref_layer.self_attn.in_proj_bias, ours.attn.in_proj.bias),
        (ref_layer.self_attn.out_proj.weight, ours.attn.out_proj.weight),
        (ref_layer.self_attn.out_proj.bias, ours.attn.out_proj.bias),
        (ref_layer.linear1.weight, ours.mlp.linear1.weight),
        (ref_layer.linear1.bias, ours.mlp.linear1.bias),
        (ref_layer.linear2.weight, ours.mlp.linear2.weight),
        (ref_layer.linear2.bias, ours.mlp.linear2.bias),
        (ref_layer.norm1.weight, ours.ln1.weight),
        (ref_layer.norm1.bias, ours.ln1.bias),
    ]
    if cross:  # torch order: self-attn (norm1), cross-attn (norm2), FFN (norm3)
        pairs += [
            (ref_layer.multihead_attn.in_proj_weight, ours.cross_attn.in_proj.weight),
            (ref_layer.multihead_attn.in_proj_bias, ours.cross_attn.in_proj.bias),
            (ref_layer.multihead_attn.out_proj.weight, ours.cross_attn.out_proj.weight),
            (ref_layer.multihead_attn.out_proj.bias, ours.cross_attn.out_proj.bias),
            (ref_layer.norm2.weight, ours.ln_cross.weight),
            (ref_layer.norm2.bias, ours.ln_cross.bias),
            (ref_layer.norm3.weight, ours.ln2.weight),
            (ref_layer.norm3.bias, ours.ln2.bias),
        ]
    else:
        pairs += [(ref_layer.norm2.weight, ours.ln2.weight), (ref_layer.norm2.bias, ours.ln2.bias)]
    with torch.no_grad():
        for dst, src in pairs:
            dst.copy_(src)


def _reference(ours: EncoderDecoder) -> nn.Transformer:
    cfg = ours.cfg
    ref = nn.Transformer(
        d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
        num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=0.0, activation="relu",
        batch_first=True, norm_first=cfg.norm == "pre", layer_norm_eps=cfg.layer_norm_eps,
    ).eval()
    for ours_layer, ref_layer in zip(ours.encoder.layers, ref.encoder.layers, strict=True):
        _copy_layer(ours_layer, ref_layer, cross=False)
    for ours_layer, ref_layer in zip(ours.decoder.layers, ref.decoder.layers, strict=True):
        _copy_layer(ours_layer, ref_layer, cross=True)
    if cfg.norm == "pre":  # a pre-norm stack ends in a LayerNorm, as torch's does
        with torch.no_grad():
            for ours_stack, ref_stack in ((ours.encoder, ref.encoder), (ours.decoder, ref.decoder)):
                ref_stack.norm.weight.copy_(ours_stack.ln_final.weight)
                ref_stack.norm.bias.copy_(ours_stack.ln_final.bias)
    else:  # torch.nn.Transformer always adds a final LayerNorm; the paper's post-norm model has none
        ref.encoder.norm = None
        ref.decoder.norm = None
    return ref


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_decoder_matches_torch_transformer(norm: str) -> None:
    cfg = TransformerConfig(vocab_size=20, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                            n_decoder_layers=2, dropout=0.1, max_len=32, norm=norm)
    ours = build_model(cfg).eval()
    assert isinstance(ours, EncoderDecoder)
    ref = _reference(ours)
    src = torch.tensor([[4, 5, 6, 7, 8, 2], [9, 10, 11, 2, 0, 0]])  # second row padded
    tgt = torch.tensor([[1, 12, 13, 14, 15], [1, 16, 17, 0, 0]])
    src_mask, tgt_pad = padding_mask(src, 0), padding_mask(tgt, 0)
    tgt_mask = combine(tgt_pad, causal_mask(tgt.size(1)))
    with torch.no_grad():
        memory = ours.encode(src, src_mask)
        hidden = ours.decode(memory, tgt, tgt_mask, src_mask)
        expected = ref(
            ours.encoder.embed(src), ours.decoder.embed(tgt),
            tgt_mask=~causal_mask(tgt.size(1))[0, 0],
            src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
        )
    torch.testing.assert_close(memory, ref.encoder(ours.encoder.embed(src), src_key_padding_mask=src == 0),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden, expected, atol=1e-5, rtol=0)


def test_embedding_is_scaled_token_embedding_plus_positions() -> None:
    cfg = TransformerConfig.toy(vocab_size=12)
    model = build_model(cfg).eval()
    ids = torch.tensor([[3, 4, 5]])
    expected = model.encoder.embedding(ids) * cfg.d_model**0.5 + model.encoder.pos_table[:3]
    torch.testing.assert_close(model.encoder.embed(ids), expected)


def test_tied_weights_share_one_matrix() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=12))
    assert model.encoder.embedding.weight is model.decoder.embedding.weight
    assert model.generator.proj.weight is model.encoder.embedding.weight
    untied = build_model(TransformerConfig(vocab_size=12, d_model=16, n_heads=2, tie_embeddings=False))
    assert untied.encoder.embedding.weight is not untied.decoder.embedding.weight


def test_dropout_is_active_in_training_only() -> None:
    model = build_model(TransformerConfig.toy(vocab_size=12))
    src, tgt = torch.tensor([[3, 4, 5, 2]]), torch.tensor([[1, 6, 7]])
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))
