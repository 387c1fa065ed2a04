"""Hugging Face models through the same capture: tiny random models of every supported family."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attention_atlas import load_trace
from attention_atlas.model.core.capture.record import capture
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.hook_names import in_vocabulary
from attention_atlas.model.hf.taps import norm_eps
from attention_atlas.model.inspect.norm_output import norm_output
from tests.tiny_hf import FAMILIES

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_does_not_change_logits(runners, family: str) -> None:
    runner = runners[family]
    model = runner.model
    ids = torch.tensor([runner.tokenizer(TEXT)["input_ids"]])
    kwargs = {"decoder_input_ids": ids[:, :3]} if runner.family.kind == "encoder-decoder" else {}
    with torch.inference_mode():
        plain = model(input_ids=ids, **kwargs)
    captured, values = capture(
        model, runner.taps, None, lambda: model(input_ids=ids, **kwargs)
    )
    key = "last_hidden_state" if runner.family.kind == "encoder" else "logits"
    assert torch.equal(plain[key], captured[key])
    assert set(values) == set(runner.taps)


LN1, LN2, LN_CROSS = (["ln1.hook_scale", "ln1.hook_normalized"], ["ln2.hook_scale", "ln2.hook_normalized"],
                      ["ln_cross.hook_scale", "ln_cross.hook_normalized"])
HEADS = ["hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z"]
ROTARY_HEADS = ["hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_attn_scores", "hook_pattern", "hook_z"]
ATTN, ROTARY_ATTN = [f"attn.{h}" for h in HEADS], [f"attn.{h}" for h in ROTARY_HEADS]
CROSS = [*(f"cross_attn.{h}" for h in HEADS), "hook_cross_attn_out", "hook_resid_mid_cross"]
LAYER_NAMES = {  # per family: the names of one layer, in table order
    "bert": ["hook_resid_pre", *ATTN, "hook_attn_out", "hook_resid_mid", *LN1, "mlp.hook_pre",
             "mlp.hook_post", "hook_mlp_out", "hook_resid_post", *LN2, "hook_normalized_resid_post"],
    "gpt2": ["hook_resid_pre", *LN1, *ATTN, "hook_attn_out", "hook_resid_mid", *LN2, "mlp.hook_pre",
             "mlp.hook_post", "hook_mlp_out", "hook_resid_post"],
    "llama": ["hook_resid_pre", *LN1, *ROTARY_ATTN, "hook_attn_out", "hook_resid_mid", *LN2,
              "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out", "hook_resid_post"],
}


def _t5_layer(cross: bool) -> list[str]:
    names = ["hook_resid_pre", *LN1, *ATTN, "hook_attn_out", "hook_resid_mid"]
    names += [*LN_CROSS, *CROSS] if cross else []
    return [*names, *LN2, "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post"]


def _bart_layer(cross: bool) -> list[str]:
    names = ["hook_resid_pre", *LN1, *ATTN, "hook_attn_out", "hook_resid_mid"]
    names += [*LN_CROSS, *CROSS] if cross else []
    return [*names, *LN2, "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
            "hook_normalized_resid_post"]


def _stack(stack: str, layer: list[str], extras: list[str]) -> list[str]:
    return [*(f"{stack}.{i}.{name}" for i in range(2) for name in layer), *(f"{stack}.{e}" for e in extras)]


LN_FINAL = ["ln_final.hook_scale", "ln_final.hook_normalized"]
HOOK_NAMES = {
    "bert": _stack("encoder", LAYER_NAMES["bert"], ["hook_embed", "hook_pos_embed"]),
    "gpt2": _stack("decoder", LAYER_NAMES["gpt2"], ["hook_embed", "hook_pos_embed", *LN_FINAL, "hook_resid_final"]),
    "llama": _stack("decoder", LAYER_NAMES["llama"], ["hook_embed", *LN_FINAL, "hook_resid_final"]),
    "t5": [*_stack("encoder", _t5_layer(False), ["hook_embed", *LN_FINAL, "hook_resid_final"]),
           *_stack("decoder", _t5_layer(True), ["hook_embed", *LN_FINAL, "hook_resid_final"])],
    "bart": [*_stack("encoder", _bart_layer(False), ["hook_embed", "hook_pos_embed"]),
             *_stack("decoder", _bart_layer(True), ["hook_embed", "hook_pos_embed"])],
}
HOOK_NAMES["marian"] = HOOK_NAMES["bart"]


@pytest.mark.parametrize("family", FAMILIES)
def test_hook_names_are_pinned(runners, family: str) -> None:
    assert list(runners[family].taps) == HOOK_NAMES[family]
    assert all(in_vocabulary(name) for name in runners[family].taps)  # a table naming a hook outside it fails


@pytest.mark.parametrize("family", ["bert", "bart", "marian"])
def test_post_norm_residual_hooks_are_the_sums_before_the_norm(runners, family: str) -> None:
    """As TransformerLens means them: resid_mid = resid_pre + attn_out, and the layer's output is the
    normalised stream (hook_normalized_resid_post), read by the next layer."""
    stack = "encoder"
    trace = runners[family].run(TEXT)
    c = {k: torch.from_numpy(v) for k, v in trace.captured.items()}
    torch.testing.assert_close(c[f"{stack}.0.hook_resid_mid"], c[f"{stack}.0.hook_resid_pre"] +
                               c[f"{stack}.0.hook_attn_out"])
    mlp_in = norm_output(runners[family], f"{stack}.0.ln1.hook_normalized",
                         trace.captured[f"{stack}.0.ln1.hook_normalized"])  # ln1's output: what the MLP reads
    torch.testing.assert_close(c[f"{stack}.0.hook_resid_post"], torch.from_numpy(mlp_in) + c[f"{stack}.0.hook_mlp_out"])
    torch.testing.assert_close(c[f"{stack}.0.hook_normalized_resid_post"], c[f"{stack}.1.hook_resid_pre"])
    resid_post = c[f"{stack}.0.hook_resid_post"]
    centred = resid_post - resid_post.mean(-1, keepdim=True)
    torch.testing.assert_close(c[f"{stack}.0.ln2.hook_scale"], centred.pow(2).mean(-1, keepdim=True).add(
        1e-5 if family != "bert" else 1e-12).sqrt())


@pytest.mark.parametrize("family", ["bert", "t5", "bart"])
def test_causal_on_hides_the_future_from_an_encoder(runners, family: str) -> None:
    runner = runners[family]
    upper = None
    for causal in ("auto", "on"):
        trace = runner.run(TEXT, options=RunOptions(causal=causal))
        pattern = trace.attention["encoder.1.attn.hook_pattern"]  # (heads, q, k)
        upper = np.triu(np.ones(pattern.shape[1:], bool), k=1)
        if causal == "auto":
            assert pattern[:, upper].min() > 0
            assert trace.masks["encoder.attn"].all()
        else:
            assert (pattern[:, upper] == 0).all()
            assert not trace.masks["encoder.attn"][upper].any()


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "marian"])
def test_causal_off_lets_a_decoder_look_ahead(runners, family: str) -> None:
    runner = runners[family]
    target = "the cat sat on the mat" if runner.family.kind == "encoder-decoder" else None
    auto = runner.run(TEXT, target, RunOptions(causal="auto")).attention["decoder.0.attn.hook_pattern"]
    off = runner.run(TEXT, target, RunOptions(causal="off")).attention["decoder.0.attn.hook_pattern"]
    upper = np.triu(np.ones(auto.shape[1:], bool), k=1)
    assert (auto[:, upper] == 0).all()
    assert (off[:, upper] > 0).all()


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "bart"])
def test_padding_hides_pad_keys_and_leaves_real_tokens_unchanged(runners, family: str) -> None:
    runner = runners[family]
    plain = runner.run(TEXT)
    padded = runner.run(TEXT, options=RunOptions(pad_to=len(plain.ids) + 4))
    n = len(plain.ids)
    assert len(padded.ids) == n + 4
    for name, pattern in padded.attention.items():
        if name.startswith("encoder") or ".cross_attn." in name or runner.family.kind == "decoder":
            assert (pattern[..., n:] == 0).all(), name
    stack = "decoder" if runner.family.kind == "decoder" else "encoder"
    np.testing.assert_allclose(padded.captured[f"{stack}.1.hook_resid_post"][:n],
                               plain.captured[f"{stack}.1.hook_resid_post"], atol=1e-5)
    assert not padded.masks[f"{stack}.attn"][:, n:].any()


def test_gqa_has_one_map_per_query_head(runners) -> None:
    runner = runners["llama"]
    assert (runner.facts.n_heads, runner.facts.n_kv_heads) == (4, 2)
    assert "h // 2" in runner.facts.notes["grouped-query attention"]
    assert runner.run(TEXT).attention["decoder.0.attn.hook_pattern"].shape[0] == 4


def test_outputs_per_kind(runners) -> None:
    lm = runners["gpt2"].run(TEXT)
    assert lm.outputs["top_next_ids"].shape == (10,)
    assert lm.outputs["top_next_probs"][0] >= lm.outputs["top_next_probs"][-1]
    encoder = runners["bert"].run("the cat sat")
    similarity = encoder.outputs["token_similarity"]
    assert similarity.shape == (5, 5)
    np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-5)
    translated = runners["marian"].run("the cat sat", target="the dog")
    assert translated.target_tokens == ["<pad>", "the", "dog"]


def test_hook_selection_keeps_only_what_is_asked(runners) -> None:
    trace = runners["llama"].run(TEXT, options=RunOptions(hooks=("*.hook_pattern",)))
    assert sorted(trace.attention) == ["decoder.0.attn.hook_pattern", "decoder.1.attn.hook_pattern"]
    assert not trace.captured  # the patterns are kept as their sources
    trace = runners["llama"].run(TEXT, options=RunOptions(hooks=("decoder.1.hook_resid_post",)))
    assert list(trace.captured) == ["decoder.1.hook_resid_post"] and not trace.pattern_sources


# -- refusing what cannot or must not be loaded ---------------------------------------------------

def test_patterns_are_kept_as_their_sources_and_survive_a_file(runners, tmp_path: Path) -> None:
    """A Hugging Face trace keeps O(tokens x d_head) per head for its patterns, reads them whole when asked, and
    writes and reads them back as sources."""
    trace = runners["llama"].run(TEXT)
    n, name = len(trace.tokens), "decoder.1.attn.hook_pattern"
    source = trace.pattern_sources[name]
    assert source.query.shape == (4, n, 8) and source.key.shape == (2, n, 8)  # 4 query heads share 2 kv heads
    assert trace.attention[name].shape == trace.shape(name) == (4, n, n)
    assert trace.attention[name].dtype == np.float16
    np.testing.assert_allclose(trace.attention[name].sum(-1), 1, atol=2e-3)
    assert np.triu(trace.attention[name][0], 1).max() == 0  # causal
    assert trace.summary()["hooks"][name] == [4, n, n]
    trace.save(tmp_path / "t.npz")
    again = load_trace(tmp_path / "t.npz")
    assert set(again.pattern_sources) == set(trace.pattern_sources)
    np.testing.assert_array_equal(again.attention[name], trace.attention[name])
    off = runners["llama"].run(TEXT, options=RunOptions(causal="off"))
    assert np.triu(off.attention[name][0], 1).max() > 0
    t5 = runners["t5"].run(TEXT).pattern_sources
    assert t5["encoder.1.attn.hook_pattern"].bias is not None  # the relative position bias, kept once
    assert np.shares_memory(t5["encoder.0.attn.hook_pattern"].bias, t5["encoder.1.attn.hook_pattern"].bias)


@pytest.mark.parametrize("family", ["t5", "bart", "marian"])
def test_the_generated_output_is_what_the_traced_decoder_reads(runners, family: str) -> None:
    """With the trained masks, reading its own greedy output back predicts that output at every position."""
    trace = runners[family].run("the cat sat on the mat")
    generated = trace.target_ids[1:]  # the decoder's input after its start token
    assert trace.outputs["predicted_ids"][: len(generated)].tolist() == generated
    assert trace.output_kind == "generated"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("causal", ["auto", "off"])
def test_a_continuation_starts_with_the_top_next_token_under_the_same_masks(runners, family, causal) -> None:
    runner = runners[family]
    trace = runner.run("the quick brown fox", options=RunOptions(causal=causal, blocked=((3, 1),)))
    first = runner.tokenizer.decode([int(trace.outputs["top_next_ids"][0])])
    assert trace.output_text.startswith(first) and trace.output_kind == "generated"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_continuation_goes_on_from_the_traced_pass_without_reading_the_prompt_again(runners, family) -> None:
    """Under the causal mask the greedy continuation starts from the traced pass's keys and values: the model
    reads the prompt once (the traced pass), then one token a step, and writes what re-reading it writes."""
    runner, text = runners[family], "the quick brown fox"
    read: list[int] = []
    handle = runner.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: read.append(args[0].shape[-1]))
    try:
        trace = runner.run(text, options=RunOptions(hooks=("*.hook_pattern",), summarised=True))
    finally:
        handle.remove()
    generated = len(runner.tokenizer(trace.output_text, add_special_tokens=False)["input_ids"])
    assert read[0] == len(trace.ids) and set(read[1:]) == {1} and generated > 1
    again = runner.run(text, options=RunOptions(blocked=((0, 3),)))  # a pair the causal mask hides: re-read
    assert again.output_text == trace.output_text

@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart"])
def test_a_given_target_is_scored_token_by_token(runners, family: str) -> None:
    trace = runners[family].run("the cat sat on the", "mat is quick")
    assert trace.output_kind == "teacher-forced" and trace.output_text == "mat is quick"
    assert [t for t in trace.outputs["forced_tokens"] if t not in ("<s>", "</s>")] == ["mat", "is", "quick"]
    probs, ranks = trace.outputs["forced_probs"], trace.outputs["forced_ranks"]
    assert ((probs > 0) & (probs <= 1)).all() and (ranks >= 1).all()
    assert ((ranks == 1) == (trace.outputs["forced_choice_tokens"] == trace.outputs["forced_tokens"])).all()


def test_a_gated_mlp_records_its_gate_and_up_projections_as_transformer_lens_does(runners) -> None:
    """TransformerLens's GatedMLP: hook_pre = x W_gate (before the activation), hook_pre_linear = x W_in (the up
    projection), hook_post = act(hook_pre) x hook_pre_linear, then W_out: hook_mlp_out."""
    runner = runners["llama"]
    trace = runner.run("the quick brown fox", options=RunOptions(hooks=("decoder.0.mlp.*", "decoder.0.hook_mlp_out",
                                                                         "decoder.0.ln2.hook_normalized")))
    c = {name: torch.from_numpy(value) for name, value in trace.captured.items()}
    mlp = runner.model.model.layers[0].mlp
    x = torch.from_numpy(norm_output(runner, "decoder.0.ln2.hook_normalized",
                                     trace.captured["decoder.0.ln2.hook_normalized"]))  # what the MLP reads
    with torch.no_grad():
        torch.testing.assert_close(c["decoder.0.mlp.hook_pre"], x @ mlp.gate_proj.weight.T)
        torch.testing.assert_close(c["decoder.0.mlp.hook_pre_linear"], x @ mlp.up_proj.weight.T)
        torch.testing.assert_close(c["decoder.0.mlp.hook_post"],
                                   mlp.act_fn(c["decoder.0.mlp.hook_pre"]) * c["decoder.0.mlp.hook_pre_linear"])
        torch.testing.assert_close(c["decoder.0.hook_mlp_out"], c["decoder.0.mlp.hook_post"] @ mlp.down_proj.weight.T)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_norms_hooks_mean_what_transformer_lens_means(runners, family: str) -> None:
    """TransformerLens (`components/layer_norm.py`, `rms_norm.py`): hook_scale = sqrt(mean(x^2) + eps) of the input
    (centred first for LayerNorm), hook_normalized = that input divided by hook_scale, before the weight and bias;
    the norm's output is hook_normalized x weight + bias. Checked on each family's first norm, its weights made
    unlike 1 and 0 (a fresh model's are exactly those, where the two meanings agree)."""
    runner = runners[family]
    stack = "encoder" if runner.facts.kind != "decoder" else "decoder"
    name = f"{stack}.0.ln1.hook_normalized"
    module = runner.taps[name].module
    inputs = []
    handle = module.register_forward_hook(lambda m, args, out: inputs.append((args[0][0].detach(), out[0].detach())))
    saved = {key: value.clone() for key, value in module.state_dict().items()}
    try:
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.uniform_(0.5, 1.5)
        trace = runner.run(TEXT, options=RunOptions(hooks=(name, name.replace("normalized", "scale"))))
        output = torch.from_numpy(norm_output(runner, name, trace.captured[name]))  # with the weights it ran with
    finally:
        handle.remove()
        module.load_state_dict(saved)
    x, out = inputs[0]  # (pos, d_model): what the norm read and gave in the traced pass
    rms = "RMS" in runner.facts.norm
    centred = x if rms else x - x.mean(-1, keepdim=True)
    scale = torch.from_numpy(trace.captured[name.replace("normalized", "scale")])
    normalized = torch.from_numpy(trace.captured[name])
    torch.testing.assert_close(scale, (centred.pow(2).mean(-1, keepdim=True) + norm_eps(module)).sqrt())
    torch.testing.assert_close(normalized, centred / scale)
    torch.testing.assert_close(output, out, atol=1e-5, rtol=1e-5)
    assert (normalized - out).abs().max() > 0.1  # the weights matter: before them is not after them
