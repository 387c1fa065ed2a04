"""A score taken apart into what each part of the stream wrote (model/inspect/score_parts.py): every query share, key
share and pair equal to one computed independently with TransformerLens 3.9 on the same random weights (its cache's
components carried through its own norms with their frozen `hook_scale`, its W_Q and W_K, its own `apply_rotary`),
each side adding up to its `hook_attn_scores`: GPT-2 (LayerNorm, biases, learned positions), Llama (RMSNorm,
rotary, grouped key/value heads) and BERT (post-norm: every norm on the way frozen)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.score_parts import explain_pattern, explain_score
from attention_atlas.model.inspect.score_setup import score_options
from tests.tiny_hf import build
from tests.transformer_lens_reference import randomise_norms, reference_of

TEXT = "the quick brown fox jumps over the lazy dog"
LAYER = 1  # the second of two: its stream holds layer 0's heads, output bias and MLP


def sharpen(model: torch.nn.Module) -> None:
    """Biases unlike 0 and query/key weights 8x larger, so that scores are of order 1 and every part is there."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") and "norm" not in name.lower() and ".ln" not in name:
                parameter.uniform_(-0.5, 0.5)
            if any(k in name for k in ("q_proj.weight", "k_proj.weight", "c_attn.weight", "query.weight",
                                       "key.weight")):
                parameter.mul_(8)


def _norm(block_norm, x: np.ndarray, scale: float) -> np.ndarray:
    """TransformerLens's norm with its scale frozen: centred where it is a LayerNorm, / scale, x its weight."""
    centred = x - x.mean(-1, keepdims=True) if hasattr(block_norm, "b") else x
    return centred / scale * block_norm.w.detach().double().numpy()


def reference_parts(reference, cache, family: str, position: int) -> dict[str, np.ndarray]:
    """{part: (d_model,)} what each part adds to layer LAYER's attention input at `position`, carried forward
    through every norm on the way with TransformerLens's own frozen scales; "bias" the norms' biases."""
    c = {name: value[0].double().numpy() for name, value in cache.items()}
    block = reference.blocks[0]
    if family == "bert":
        parts = {"embed": c["blocks.0.hook_resid_pre"][position]}
    else:
        parts = {"embed": c["hook_embed"][position]} | ({"pos_embed": c["hook_pos_embed"][position]}
                                                        if family == "gpt2" else {})
    parts["bias"] = np.zeros_like(parts["embed"])
    w_o = block.attn.W_O.detach().double().numpy()  # (heads, d_head, d_model)
    for h in range(w_o.shape[0]):
        parts[f"L0H{h}"] = c["blocks.0.attn.hook_z"][position, h] @ w_o[h]
    if family != "llama":
        parts["L0.attn_bias"] = block.attn.b_O.detach().double().numpy()

    def through(norm, hook: str) -> None:
        scale = float(c[hook][position, 0])
        for name in parts:
            parts[name] = _norm(norm, parts[name], scale)
        parts["bias"] = parts["bias"] + norm.b.detach().double().numpy()

    if family == "bert":  # attention, ln1, the MLP, ln2: the next layer reads that
        through(block.ln1, "blocks.0.ln1.hook_scale")
        parts["L0.mlp"] = c["blocks.0.hook_mlp_out"][position]
        through(block.ln2, "blocks.0.ln2.hook_scale")
        return parts
    parts["L0.mlp"] = c["blocks.0.hook_mlp_out"][position]
    scale = float(c[f"blocks.{LAYER}.ln1.hook_scale"][position, 0])
    norm = reference.blocks[LAYER].ln1
    parts = {name: _norm(norm, value, scale) for name, value in parts.items()}
    if hasattr(norm, "b"):
        parts["bias"] = parts["bias"] + norm.b.detach().double().numpy()
    return parts


def reference_side(reference, cache, family: str, which: str, head: int, position: int) -> dict[str, np.ndarray]:
    """{part: (d_head,)} each part's query (or key) of `head` at `position`, as TransformerLens's attention reads it:
    through its W_Q (W_K: the key head `head` reads, as its W_K repeats it) and b_Q, rotated by its `apply_rotary`."""
    attention = reference.blocks[LAYER].attn
    w = (attention.W_Q if which == "q" else attention.W_K)[head].detach().double().numpy()
    b = (attention.b_Q if which == "q" else attention.b_K)[head].detach().double().numpy()
    sides = {name: value @ w for name, value in reference_parts(reference, cache, family, position).items()}
    sides["bias"] = sides["bias"] + b
    if family != "llama":
        return sides
    names = list(sides)
    stacked = np.zeros((1, position + 1, len(names), w.shape[1]))  # (batch, pos, parts as heads, d_head)
    stacked[0, position] = np.stack([sides[n] for n in names])
    rotated = attention.apply_rotary(torch.from_numpy(stacked).float())[0, position].double().numpy()
    return dict(zip(names, rotated, strict=True))


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_every_share_is_computed_again_with_transformer_lens(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    sharpen(runner.model)
    site = "encoder.attn" if family == "bert" else "decoder.attn"
    trace = runner.run(TEXT, options=score_options(runner, site, LAYER))
    reference = reference_of(family, runner.model).eval()
    _, cache = reference.run_with_cache(torch.tensor([trace.ids]))
    scores = cache[f"blocks.{LAYER}.attn.hook_attn_scores"][0].double().numpy()  # (heads, q_len, k_len)
    query = len(trace.ids) - 1
    for head in range(scores.shape[0]):
        key = int(np.argmax(np.where(np.isfinite(scores[head, query]), np.abs(scores[head, query]), -1)))
        found = explain_score(runner, trace, site, LAYER, head, query, key)
        q_parts = reference_side(reference, cache, family, "q", head, query)
        k_parts = reference_side(reference, cache, family, "k", head, key)
        scale = reference.blocks[LAYER].attn.attn_scale
        q_whole, k_whole = sum(q_parts.values()), sum(k_parts.values())
        size = abs(scores[head, query, key])
        assert size > 0.05  # a score worth taking apart
        assert set(found.query_parts) == set(q_parts) and set(found.key_parts) == set(k_parts)
        for name, share in zip(found.query_parts, found.query_shares, strict=True):
            assert share == pytest.approx(q_parts[name] @ k_whole / scale, abs=1e-4 * size), (head, name)
        for name, share in zip(found.key_parts, found.key_shares, strict=True):
            assert share == pytest.approx(q_whole @ k_parts[name] / scale, abs=1e-4 * size), (head, name)
        theirs = np.array([[q_parts[a] @ k_parts[b] / scale for b in found.key_parts] for a in found.query_parts])
        np.testing.assert_allclose(found.pairs, theirs, atol=1e-4 * size)
        for total in (found.query_shares.sum(), found.key_shares.sum(), found.pairs.sum(), found.score):
            assert total == pytest.approx(scores[head, query, key], abs=1e-4 * size)
        assert found.position_bias == 0.0 and found.position_bias_name is None
        assert np.abs(found.query_shares).max() > 0.05 * size  # real parts, not a comparison of zeros
        assert sorted(np.abs(found.key_shares))[-2] > 1e-3 * size  # more than one part on the key side


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_a_rows_shares_add_up_to_transformer_lens_scores_at_every_key(tmp_path, family: str) -> None:
    runner = load_hf_runner(str(build(family, tmp_path / family)))
    randomise_norms(runner.model)
    sharpen(runner.model)
    site = "encoder.attn" if family == "bert" else "decoder.attn"
    trace = runner.run(TEXT, options=score_options(runner, site, LAYER))
    _, cache = reference_of(family, runner.model).eval().run_with_cache(torch.tensor([trace.ids]))
    scores = cache[f"blocks.{LAYER}.attn.hook_attn_scores"][0].double().numpy()
    query = 5
    row = explain_pattern(runner, trace, site, LAYER, 3, query)
    expected_keys = np.arange(len(trace.ids)) if family == "bert" else np.arange(query + 1)
    np.testing.assert_array_equal(row.keys, expected_keys)
    theirs = scores[3, query, row.keys]
    size = np.abs(theirs).max()
    np.testing.assert_allclose(row.query_shares.sum(0), theirs, atol=1e-4 * size)
    np.testing.assert_allclose(row.key_shares.sum(0), theirs, atol=1e-4 * size)
    single = explain_score(runner, trace, site, LAYER, 3, query, 2)  # one key's column is that key's split
    np.testing.assert_allclose(row.key_shares[:, 2], single.key_shares, atol=1e-9 * size)
    np.testing.assert_allclose(row.query_shares[:, 2], single.query_shares, atol=1e-9 * size)
    assert row.pattern.sum() == pytest.approx(1.0, abs=1e-3)
