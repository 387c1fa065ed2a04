"""Hybrid models (softmax attention layers among Mamba, gated delta-net or short-convolution layers), tiny and random
from their config classes (tests/tiny_hybrids.py): they open through the Hugging Face path with the guard's proof, the
app's layers are their softmax attention layers (0 .. n - 1) placed at their true layer numbers, each pattern is
transformers' eager one, and the model card names the layer map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import attribute, attribution_options, likeliest
from attention_atlas.model.inspect.contributions import contribution_graph, contribution_options
from attention_atlas.model.inspect.patching import KINDS, kinds_of, patch
from attention_atlas.model.inspect.tour import step_shape, tour_options, tour_steps
from attention_atlas.plot.tour import step_figure
from tests.model.test_score_parts_hybrids import frozen
from tests.tiny_hf import log_probs_with_columns_zeroed
from tests.tiny_hybrids import ATTENTION_BLOCKS, HYBRID_TYPES, build_hybrid, build_qwen3_5_checkpoint

TEXT = "the quick brown fox jumps over the lazy dog"
LAYER_MAPS = {  # model type -> the model card's layer map
    "qwen3_next": "layers 0, 2: gated delta-net (linear attention); layers 1, 3: softmax attention (shown as "
                  "attention layers 0–1, of 4 layers)",
    "qwen3_5_text": "layers 0, 2: gated delta-net (linear attention); layers 1, 3: softmax attention (shown as "
                    "attention layers 0–1, of 4 layers)",
    "jamba": "layers 0, 2: Mamba (state space); layers 1, 3: softmax attention (shown as attention layers 0–1, of 4 "
             "layers)",
    "granitemoehybrid": "layers 0, 2: Mamba (state space); layers 1, 3: softmax attention (shown as attention "
                        "layers 0–1, of 4 layers)",
    "nemotron_h": "layer 0: Mamba (state space); layers 1, 3: softmax attention (shown as attention layers 0–1, of "
                  "4 layers); layer 2: no token mixing (an MLP only)",
    "kimi_linear": "layers 0, 2: Kimi delta attention (linear attention); layers 1, 3: softmax attention (shown as "
                   "attention layers 0–1, of 4 layers)",
    "lfm2": "layers 0, 2: short convolution; layers 1, 3: softmax attention (shown as attention layers 0–1, of 4 "
            "layers)",
    "falcon_h1": "layers 0, 1: softmax attention + Mamba (state space)",
}


@pytest.fixture(scope="module")
def hybrid_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hybrids")
    return {model_type: build_hybrid(model_type, root / model_type) for model_type in HYBRID_TYPES}


@pytest.fixture(scope="module")
def hybrid_runners(hybrid_folders) -> dict:
    return {model_type: load_hf_runner(str(folder)) for model_type, folder in hybrid_folders.items()}


@pytest.mark.parametrize("summarised", [False, True], ids=["plain", "summarised"])
@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_attention_layers_are_eager_ones_at_their_true_layers(hybrid_folders, hybrid_runners, model_type: str,
                                                               summarised: bool) -> None:
    """Each attention layer's pattern is eager's `attentions` entry (one per softmax layer), the next-token
    probabilities are eager's, and each layer's hook_resid_pre / hook_resid_post are its true block's input and
    output (eager's hidden states there)."""
    runner = hybrid_runners[model_type]
    blocks = ATTENTION_BLOCKS[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern", "*.hook_resid_pre", "*.hook_resid_post"),
                                                summarised=summarised))
    eager = transformers.AutoModelForCausalLM.from_pretrained(hybrid_folders[model_type],
                                                              attn_implementation="eager").eval()
    with torch.inference_mode():
        out = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True, output_hidden_states=True,
                    use_cache=False)
    assert len(out.attentions) == trace.n_layers("decoder.attn") == len(blocks) == 2
    for layer, reference in enumerate(out.attentions):
        pattern = trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32)
        np.testing.assert_allclose(pattern, reference[0].numpy(), atol=1e-5, err_msg=f"layer {layer}")
        block = blocks[layer]
        np.testing.assert_allclose(trace.captured[f"decoder.{layer}.hook_resid_pre"],
                                   out.hidden_states[block][0].numpy(), atol=1e-5)
        if f"decoder.{layer}.hook_resid_post" in trace.captured and block + 1 < len(out.hidden_states) - 1:
            # (not placed where the block scales what it adds: Granite's residual multiplier, Falcon-H1's; the last
            # hidden state is the final norm's output)
            np.testing.assert_allclose(trace.captured[f"decoder.{layer}.hook_resid_post"],
                                       out.hidden_states[block + 1][0].numpy(), atol=1e-5)
    probabilities = out.logits[0, -1].softmax(-1)
    top = trace.outputs["top_next_ids"]
    np.testing.assert_allclose(trace.outputs["top_next_probs"], probabilities[top].numpy(), atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_the_model_card_names_the_layer_map(hybrid_runners, model_type: str) -> None:
    facts = hybrid_runners[model_type].run(TEXT).facts
    assert facts.notes["layer map"] == LAYER_MAPS[model_type]
    assert facts.n_decoder_layers == 2
    parallel = model_type == "falcon_h1"  # every layer attends: the app's layer i is layer i
    assert facts.attention_blocks == ([] if parallel else [1, 3])
    assert facts.layer_words(1) == ("layer 1" if parallel else "layer 3 (attention layer 1)")


def test_a_trace_file_keeps_the_true_layer_numbers(hybrid_runners, tmp_path) -> None:
    hybrid_runners["jamba"].run(TEXT, options=RunOptions(hooks=("*.hook_pattern",))).save(tmp_path / "jamba.npz")
    facts = Trace.load(tmp_path / "jamba.npz").facts
    assert facts.attention_blocks == [1, 3] and facts.notes["layer map"] == LAYER_MAPS["jamba"]


def test_a_plain_models_card_has_no_layer_map(folders) -> None:
    facts = load_hf_runner(str(folders["llama"])).run(TEXT).facts
    assert "layer map" not in facts.notes and facts.attention_blocks == [] and facts.layer_words(1) == "layer 1"


def test_facts_written_before_the_layer_numbers_still_read() -> None:
    """A trace file's facts without `attention_blocks` (written before hybrids opened) read as every layer's own."""
    facts = ModelFacts(model_id="m", family="f", kind="decoder", n_encoder_layers=0, n_decoder_layers=2, n_heads=4,
                       n_kv_heads=4, d_model=32, d_ff=64, vocab_size=40, max_len=64, positional="rotary",
                       norm="pre-norm", n_params=1, device="cpu")
    assert facts.attention_blocks == [] and facts.layer_words(0) == "layer 0"


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_attribution_adds_up_to_the_models_logits_and_the_graph_refuses(hybrid_runners, model_type: str) -> None:
    """Direct logit attribution splits a hybrid's logit difference with its other blocks as parts of their own, each
    block's share its output less its input (transformers' hidden states) through the final norm, its scale frozen,
    onto the unembedding, and the parts add up to transformers' own logits; the contribution graph, which splits
    each sum into heads and an MLP, still says it does not apply."""
    runner = hybrid_runners[model_type]
    trace = runner.run(TEXT, options=attribution_options(runner))
    found = attribute(runner, trace, " fox", " dog")
    model, norm = runner.model, runner.taps["decoder.ln_final.hook_normalized"].module  # the final norm's module
    seen = {}
    handle = norm.register_forward_pre_hook(lambda module, args: seen.update(stream=args[0][0, -1]))
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([trace.ids]), output_hidden_states=True, use_cache=False)
        handle.remove()
        fox, dog = (runner.text.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" fox", " dog"))
        assert found.model_logit == pytest.approx(float(out.logits[0, -1, fox] - out.logits[0, -1, dog]), abs=1e-5)
        assert found.total == pytest.approx(found.model_logit, abs=1e-5)
        unembedding = model.get_output_embeddings().weight[fox] - model.get_output_embeddings().weight[dog]
        blocks = [name for name in found.blocks if name.startswith("block ")]
        for name in blocks:
            block = int(name.split()[1])
            written = out.hidden_states[block + 1][0, -1] - out.hidden_states[block][0, -1]
            theirs = float(frozen(norm, written, seen["stream"]) @ unembedding)
            assert found.blocks[name] == pytest.approx(theirs, abs=1e-4 * abs(found.total) + 1e-6), name
    assert len(blocks) == (0 if model_type == "falcon_h1" else 2)
    assert np.isnan(found.mlp).all() == (model_type in ("granitemoehybrid", "falcon_h1"))  # in L{l}.rest
    parallel = model_type == "falcon_h1"  # attention and Mamba side by side in every block: no block's sum is shown
    with pytest.raises(UserError, match="its residual stream is not attention's sum" if parallel else
                       "the contribution graph cannot split the stream into parts"):
        contribution_graph(runner, runner.run(TEXT, options=contribution_options()))


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_the_likeliest_answers_are_the_models_own(hybrid_folders, hybrid_runners, model_type: str) -> None:
    """The Attribution page's answers read the last block's output (decoder.blocks.N.hook_resid_post), whatever the
    app's last attention layer offers: transformers' own two likeliest next tokens."""
    runner = hybrid_runners[model_type]
    trace = runner.run(TEXT, options=attribution_options(runner))
    eager = transformers.AutoModelForCausalLM.from_pretrained(hybrid_folders[model_type]).eval()
    with torch.inference_mode():
        probs = eager(input_ids=torch.tensor([trace.ids]), use_cache=False).logits[0, -1].double().softmax(-1)
    top = torch.topk(probs, 2)
    found = likeliest(runner, trace, -1, 2)
    assert [text for text, _ in found] == [runner.text.tokenizer.decode([int(i)]) for i in top.indices]
    np.testing.assert_allclose([p for _, p in found], top.values.numpy(), atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_attention_hooks_hold_the_models_heads(hybrid_runners, model_type: str) -> None:
    """Every per-head hook placed holds 4 query heads or 2 key/value heads (Kimi-Linear's latent attention: a key and
    a value for each of the 4 heads); Qwen3.5/Next's query projection makes each head's query and its output gate, so
    its output is no hook_q and the card lists hook_q as not found."""
    runner = hybrid_runners[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=("*.attn.*",)))
    for name, value in trace.captured.items():
        heads = 2 if name.endswith(("hook_k", "hook_v", "hook_rot_k")) and model_type != "kimi_linear" else 4
        assert value.shape[0] == heads, name
    gated = model_type in ("qwen3_next", "qwen3_5_text")
    assert ("attn.hook_q" in runner.family.unplaced) == gated
    assert ("decoder.1.attn.hook_rot_q" in trace.captured) == (runner.family.positional == "rotary")


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_hybrids_generate_the_same_with_and_without_a_cache(hybrid_runners, model_type: str) -> None:
    """The stepper's cache holds the Mamba, delta-net and convolution states as well as the keys and values."""
    runner = hybrid_runners[model_type]
    greedy = lambda logits, step: int(logits.argmax())  # noqa: E731
    cached = list(generate(runner.stepper(TEXT, RunOptions()), [], 5, greedy))
    full = list(generate(runner.stepper(TEXT, RunOptions(), use_cache=False), [], 5, greedy))
    assert [s.token_id for s in cached] == [s.token_id for s in full] and cached
    for a, b in zip(cached, full, strict=True):
        np.testing.assert_allclose(a.self_rows, b.self_rows, atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_ablating_a_head_zeroes_it_in_its_true_layer(hybrid_runners, model_type: str) -> None:
    """Ablating head 0 of attention layer 1 gives the next-token log-probabilities of the model with that head's
    input to its output projection zeroed in block 3 (Falcon-H1: block 1)."""
    runner = hybrid_runners[model_type]
    trace = runner.run(TEXT, options=RunOptions(hooks=()))
    outcome = runner.ablation_outcomes(trace, [(), (("decoder.1.attn", 0),)], "zero")
    attention = runner.model.base_model.get_submodule(runner.family.layer_taps["decoder"]["attn.hook_z"][0]
                                                      .format(i=ATTENTION_BLOCKS[model_type][1]))
    projection = next(getattr(attention, name) for name in ("o_proj", "out_proj") if hasattr(attention, name))
    d_value = runner.run(TEXT, options=RunOptions(hooks=("decoder.1.attn.hook_z",))).captured[
        "decoder.1.attn.hook_z"].shape[-1]  # 8 (Kimi-Linear's latent attention: values 6 wide)
    zeroed = log_probs_with_columns_zeroed(runner.model, projection, trace.ids, slice(0, d_value))  # head 0
    np.testing.assert_allclose(outcome.values[1, -1], zeroed[-1], atol=1e-5)
    assert not np.allclose(outcome.values[0, -1], outcome.values[1, -1], atol=1e-7)


@pytest.mark.parametrize(("model_type", "kinds"), [
    ("lfm2", ["short convolution", "softmax attention"] * 2), ("granitemoehybrid", ["Mamba", "softmax attention"] * 2),
    ("falcon_h1", ["softmax attention + Mamba"] * 2)])
def test_the_tour_shows_every_block_of_its_stream(hybrid_folders, hybrid_runners, model_type: str,
                                                  kinds: list[str]) -> None:
    """The blocks step draws the length of each token's vector after every block (transformers' hidden states), its
    shape said alike, and says whether the blocks are alike; where the stream is not recorded, there is no such step."""
    runner = hybrid_runners[model_type]
    trace = runner.run(TEXT, options=tour_options(runner.facts))
    step = next(step for step in tour_steps(trace) if step.key == "decoder.blocks")
    assert step.title == f"The other {len(kinds) - 1} blocks"
    assert (f"not all alike ({LAYER_MAPS[model_type]})" in step.text) == (model_type != "falcon_h1")
    drawn = step_figure(trace, step)
    assert drawn.rows == [f"after block {b} ({kind})" for b, kind in enumerate(kinds)]
    assert step_shape(trace, step) == (("layers", "tokens", "d_model"), (len(kinds), len(trace.ids), 32))
    eager = transformers.AutoModelForCausalLM.from_pretrained(hybrid_folders[model_type]).eval()
    with torch.inference_mode():
        hidden = eager(input_ids=torch.tensor([trace.ids]), output_hidden_states=True, use_cache=False).hidden_states
    np.testing.assert_allclose(drawn.value[:-1], [np.linalg.norm(h[0].numpy(), axis=-1) for h in hidden[1:-1]],
                               rtol=1e-5)  # (the last hidden state is the final norm's output)
    unrecorded = runner.run(TEXT, options=RunOptions(hooks=("decoder.hook_*", "decoder.0.*")))
    assert "decoder.blocks" not in [step.key for step in tour_steps(unrecorded)]


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_patching_offers_what_the_blocks_hold(hybrid_runners, model_type: str) -> None:
    """Patching offers the kinds whose hook every attention layer holds: Granite 4's and Falcon-H1's blocks add
    attention's and the MLP's outputs scaled (or attention's beside Mamba's), Nemotron-H's attention blocks have no
    MLP; a kind asked for that the model lacks is refused naming those it has. The kinds offered patch: the last
    token's stream patched into either attention layer's input gives the clean logit difference (the texts differ
    only there)."""
    runner = hybrid_runners[model_type]
    clean, corrupted = "the quick brown fox", "the quick brown dog"
    lacking = {"granitemoehybrid": ("attn_out", "mlp_out"), "falcon_h1": ("attn_out", "mlp_out"),
               "nemotron_h": ("mlp_out",)}.get(model_type, ())
    assert kinds_of(runner) == tuple(kind for kind in KINDS if kind not in lacking)
    for kind in lacking:
        with pytest.raises(UserError, match=f"has no {kind} to patch: choose among {', '.join(kinds_of(runner))}"):
            patch(runner, clean, corrupted, " fox", " dog", (kind,))
    found = patch(runner, clean, corrupted, " fox", " dog")
    assert found.complete and tuple(found.results) == kinds_of(runner) and found.results["head_out"].shape == (2, 4)
    np.testing.assert_allclose(found.normalised("resid_pre")[:, -1], [1.0, 1.0], atol=1e-4)


def test_a_qwen3_5_checkpoint_opens_as_its_language_model(tmp_path) -> None:
    """A Qwen3.5 folder as published (model type "qwen3_5", a vision tower beside the language model) opens as
    AutoModelForCausalLM's Qwen3_5ForCausalLM with the checkpoint's own language-model weights, past the guard."""
    saved = build_qwen3_5_checkpoint(tmp_path / "qwen3_5").state_dict()
    runner = load_hf_runner(str(tmp_path / "qwen3_5"))
    assert type(runner.model).__name__ == "Qwen3_5ForCausalLM" and runner.family.blocks == (1, 3)
    for name, value in runner.model.state_dict().items():
        torch.testing.assert_close(value, saved[name.replace("model.", "model.language_model.", 1)], rtol=0, atol=0)


@pytest.mark.parametrize("model_type", ["qwen3_next", "nemotron_h"])
def test_a_summarised_run_by_the_torch_ops_gives_the_plain_runs_patterns(hybrid_runners, monkeypatch,
                                                                          model_type: str) -> None:
    """The summarised run as a GPU makes it (the torch ops, here on the CPU) keeps each attention layer's pattern."""
    runner = hybrid_runners[model_type]
    plain = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern", "*.hook_z")))
    monkeypatch.setattr(native, "attention_rows", lambda: None)
    made = runner.run(TEXT, options=RunOptions(hooks=("*.hook_pattern", "*.hook_z"), summarised=True))
    for layer in range(2):
        np.testing.assert_allclose(made.pattern_source("decoder.attn", layer).pattern(dtype=np.float32),
                                   plain.pattern_source("decoder.attn", layer).pattern(dtype=np.float32), atol=1e-6)
        np.testing.assert_allclose(made.captured[f"decoder.{layer}.attn.hook_z"],
                                   plain.captured[f"decoder.{layer}.attn.hook_z"], atol=1e-5)
    np.testing.assert_allclose(made.outputs["top_next_probs"], plain.outputs["top_next_probs"], atol=1e-5)
