"""A score taken apart on the models TransformerLens does not load (model/inspect/score_parts.py): a row's scores, which
each side's shares add up to, checked against transformers' own eager attention (its probabilities: the difference of
two keys' log-probabilities is the difference of their scores) with query/key norms, ALiBi, partial rotary, parallel
blocks, soft-capping, norms after attention, multi-head latent attention, T5's relative buckets, DeBERTa's position
terms and cross-attention (the encoder's output as keys, pre- and post-norm); the shipped toy-induction's
K-composition; and every refusal, each with its reason (tests/model/test_score_parts_hybrids.py: hybrids, and one
share of each new layout computed again)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.score_parts import explain_pattern, explain_score
from attention_atlas.model.inspect.score_setup import score_options
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import build, build_type
from tests.transformer_lens_reference import randomise_norms

TEXT = "the quick brown fox jumps over the lazy dog"
TARGET = "the cat sat on the mat"
CASES = [  # (model type, site, layer): what each brings
    ("qwen3", "decoder.attn", 1),  # query and key norms (their RMS frozen)
    ("bloom", "decoder.attn", 1),  # ALiBi: a position bias outside q·k
    ("phi", "decoder.attn", 1),  # partial rotary, attention and MLP in parallel
    ("gpt_neox", "decoder.attn", 1),  # partial rotary, a fused projection
    ("gemma2", "decoder.attn", 1),  # soft-capping, a norm after attention (its scale frozen)
    ("gemma3_text", "decoder.attn", 1),  # a norm after attention, query/key norms, sliding layer 0
    ("olmo2", "decoder.attn", 1),  # no norm before attention, one after; query/key norms over every head at once
    ("deepseek_v2", "decoder.attn", 1),  # multi-head latent attention: keys through a shared latent and its norm
    ("deepseek_v3", "decoder.attn", 1),  # and queries through their own latent; rotated pairs laid out apart
    ("t5", "encoder.attn", 1),  # relative position buckets, no scale
    ("t5", "decoder.cross_attn", 1),  # queries from the decoder, keys from the encoder's output (pre-norm)
    ("bart", "decoder.cross_attn", 1),  # the same, post-norm
    ("deberta-v2", "encoder.attn", 1),  # DeBERTa's position terms
]


def eager_model(runner, folder):
    """The same weights in transformers' eager attention, which returns its probabilities."""
    eager = type(runner.model).from_pretrained(folder, attn_implementation="eager").eval()
    eager.load_state_dict(runner.model.state_dict())
    return eager


@pytest.mark.parametrize(("model_type", "site", "layer"), CASES, ids=lambda v: str(v))
def test_each_side_adds_up_to_transformers_own_scores(tmp_path, model_type: str, site: str, layer: int) -> None:
    folder = build(model_type, tmp_path / "m") if model_type in ("t5", "bart") else build_type(model_type,
                                                                                                 tmp_path / "m")
    row = rows_against_eager(folder, site, layer)
    if model_type in ("bloom", "t5") and site != "decoder.cross_attn":
        assert row.position_bias_name is not None and np.abs(row.position_bias).max() > 0
    if site == "decoder.cross_attn":
        assert all(name.startswith("encoder.") or name == "bias" for name in row.key_parts)
        assert len(row.keys) == len(row.key_tokens) and "L0.cross.H1" in row.query_parts


def rows_against_eager(folder, site: str, layer: int):
    """Every head's row at the last query of `layer`, its scores held to transformers' eager attention and each side
    adding up to them; the last head's row."""
    runner = load_hf_runner(str(folder))
    randomise_norms(runner.model)
    seq2seq = runner.facts.kind == "encoder-decoder"
    trace = runner.run(TEXT, TARGET if seq2seq else None, score_options(runner, site, layer))
    query = len(trace.query_tokens(site)) - 1
    with torch.no_grad():
        given = {"decoder_input_ids": torch.tensor([trace.target_ids])} if seq2seq else {}
        out = eager_model(runner, folder)(input_ids=torch.tensor([trace.ids]), output_attentions=True, **given)
    attentions = {"encoder.attn": "encoder_attentions" if seq2seq else "attentions",
                  "decoder.cross_attn": "cross_attentions", "decoder.attn": "decoder_attentions" if seq2seq
                  else "attentions"}[site]
    probabilities = getattr(out, attentions)[layer][0].double().numpy()  # (heads, q_len, k_len)
    for head in range(runner.facts.n_heads):
        row = explain_pattern(runner, trace, site, layer, head, query)
        capped = row.scores if row.softcap is None else row.softcap * np.tanh(
            (row.scores - row.position_bias) / row.softcap) + row.position_bias
        theirs = np.log(probabilities[head, query, row.keys])
        np.testing.assert_allclose(capped - capped[0], theirs - theirs[0], atol=1e-4 * np.abs(capped).max() + 1e-5)
        for shares in (row.query_shares, row.key_shares):
            np.testing.assert_allclose(shares.sum(0) + row.position_bias, row.scores,
                                       atol=1e-4 * np.abs(row.scores).max())
        assert np.ptp(row.scores) > 1e-3  # scores that differ: the comparison says something
    return row


def test_toy_inductions_key_side_is_led_by_a_previous_token_head() -> None:
    """K-composition: toy-induction repeats a text of distinct letters; at most queries of the repeat, the largest
    part of its induction head's score at the key it looks for (the token after the query's first occurrence) is what
    a layer-0 head that attends to the previous token wrote at that key."""
    runner = load_runner("toy-induction")
    led = []
    for text in ("qwertyuiop", "mnbvcxzlkj"):
        trace = runner.run(text, None, RunOptions(hooks=("*",)))  # it writes the repeat itself
        assert trace.tokens[1:] == list(text + text)
        n, period = len(trace.tokens), len(text)
        repeat = range(period + 1, n)
        first = trace["decoder.0.attn.hook_pattern"]  # (heads, pos, pos)
        previous = [f"L0H{h}" for h in range(4) if np.mean([first[h, i, i - 1] for i in range(2, period + 1)]) > 0.4]
        assert previous  # the model has such heads
        second = trace["decoder.1.attn.hook_pattern"]
        induction = int(np.argmax([np.mean([second[h, i, i - period + 1] for i in repeat]) for h in range(4)]))
        assert np.mean([second[induction, i, i - period + 1] for i in repeat]) > 0.8
        for query in repeat:
            row = explain_pattern(runner, trace, "decoder.attn", 1, induction, query)
            column = int(np.flatnonzero(row.keys == query - period + 1)[0])
            if row.pattern[column] > 0.5:  # where it does look there
                led.append(row.key_parts[int(np.argmax(row.key_shares[:, column]))] in previous)
    assert len(led) >= 16 and sum(led) > len(led) / 2, led


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    runner = load_hf_runner(str(build("gpt2", tmp_path_factory.mktemp("gpt2") / "gpt2")))
    return runner, runner.run(TEXT, None, score_options(runner, "decoder.attn", 1))


def test_a_key_the_mask_hides_is_refused(gpt2) -> None:
    runner, trace = gpt2
    with pytest.raises(UserError, match=r"cannot see the key at 5 .*the mask hides it"):
        explain_score(runner, trace, "decoder.attn", 1, 0, 3, 5)


def test_parts_that_do_not_add_up_are_refused(gpt2) -> None:
    """One MLP's output changed after the run: its parts no longer add up to the stream the model read."""
    runner, trace = gpt2
    mlp = trace["decoder.0.hook_mlp_out"] + np.linspace(-1, 1, 32, dtype=np.float32)  # (a constant: centred away)
    changed = dataclasses.replace(trace, captured={**trace.captured, "decoder.0.hook_mlp_out": mlp})
    with pytest.raises(UserError, match=r"The parts add up to .* but the model's own score is"):
        explain_score(runner, changed, "decoder.attn", 1, 0, 5, 2)


def test_a_run_without_the_streams_parts_is_refused(gpt2) -> None:
    runner, _ = gpt2
    trace = runner.run(TEXT, None, RunOptions(hooks=("*.hook_pattern",)))
    with pytest.raises(UserError, match=r"this run holds no decoder\.\*\.ln1\.hook_normalized, .*hook_attn_out\. "):
        explain_score(runner, trace, "decoder.attn", 1, 0, 5, 2)


def test_a_site_layer_or_head_outside_the_run_is_refused(gpt2) -> None:
    runner, trace = gpt2
    with pytest.raises(UserError, match=r"no attention site 'encoder\.attn'"):
        explain_score(runner, trace, "encoder.attn", 1, 0, 5, 2)
    with pytest.raises(UserError, match="Layer 2 is outside the 2 layers"):
        explain_score(runner, trace, "decoder.attn", 2, 0, 5, 2)
    with pytest.raises(UserError, match="Head 4 is outside the 4 heads"):
        explain_score(runner, trace, "decoder.attn", 1, 4, 5, 2)
    with pytest.raises(UserError, match="outside the sequence of 9 tokens"):
        explain_score(runner, trace, "decoder.attn", 1, 0, 9, 2)


def test_heads_that_do_not_add_up_to_what_attention_writes_are_refused(gpt2) -> None:
    """What layer 0's attention writes changed after the run (as a norm inside it that no hook shows would): its
    heads' z · W_O no longer add up to it, so no earlier head's share is told."""
    runner, trace = gpt2
    written = trace["decoder.0.hook_attn_out"] * 1.5
    changed = dataclasses.replace(trace, captured={**trace.captured, "decoder.0.hook_attn_out": written})
    with pytest.raises(UserError, match=r"heads of decoder\.0\.attn do not add up .* cannot be told apart"):
        explain_score(runner, changed, "decoder.attn", 1, 0, 5, 2)


def test_a_bfloat16_models_scores_are_read_from_the_bits_its_trace_keeps(tmp_path) -> None:
    """A bfloat16 run keeps its queries and keys as bfloat16 bits (uint16 on the host): its split adds up to its
    scores, which are the float32 model's to bfloat16's precision."""
    import attention_atlas as aa

    folder = build("llama", tmp_path / "llama")
    rows = [aa.load(folder, precision=p).explain_pattern(TEXT, layer=1, head=0, query=8)
            for p in ("float32", "bfloat16")]
    size = np.abs(rows[0].scores).max()
    assert size > 0.01
    np.testing.assert_allclose(rows[1].scores, rows[0].scores, atol=0.05 * size)
    for shares in (rows[1].query_shares, rows[1].key_shares):
        np.testing.assert_allclose(shares.sum(0), rows[1].scores, atol=0.03 * size)


def test_the_api_reads_the_texts_own_tokens_unless_told_another_site() -> None:
    """An encoder-decoder (toy-date, post-norm, from scratch): no site is its encoder's self-attention, over the
    text's tokens; its decoder's cross-attention reads the decoder's stream for queries, the encoder's for keys."""
    import attention_atlas as aa

    model = aa.load("toy-date")
    own = model.explain_score("march 3 2021", layer=1, head=0, query=2, key=5)
    assert own.site == "encoder.attn" and own.query_tokens == model.run("march 3 2021").tokens
    cross = model.explain_pattern("march 3 2021", layer=1, head=0, query=3, site="decoder.cross_attn")
    assert cross.query_tokens[0] == "<s>" and len(cross.keys) == len(own.key_tokens)
    assert "encoder.L1.mlp" in cross.key_parts and "L1H0" in cross.query_parts  # the layer's own self-attention
    for shares in (cross.query_shares, cross.key_shares):
        np.testing.assert_allclose(shares.sum(0), cross.scores, atol=1e-4 * np.abs(cross.scores).max())
