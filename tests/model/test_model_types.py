"""Every model type the app opens beyond the core families (tests/tiny_hf.py TYPES), tiny and random from its config
class: its attention and outputs are transformers' own eager ones, its hooks add up as their names say, the hooks
it could not place are the ones pinned here, and it generates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.hook_names import in_vocabulary
from attention_atlas.model.hf.families import description
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.head_weights import head_weights
from tests.tiny_hf import DECODER_TYPES, FAMILIES, SEQ2SEQ_TYPES, TYPES, bert_tokenizer, build_type

TEXT, TARGET = "the quick brown fox jumps over the lazy dog", "the cat sat on the mat"
MODELS_DOC = Path(__file__).parents[2] / "docs" / "models.md"
NOT_FOUND = {  # model type -> the hooks its layout has that the app cannot place (the model card lists them)
    "phi": ("ln2.hook_scale", "ln2.hook_normalized"),  # one norm before attention and the MLP, which run in parallel
    "gptj": ("ln2.hook_scale", "ln2.hook_normalized"),
    "cohere": ("ln2.hook_scale", "ln2.hook_normalized"),
    "olmo2": ("ln1.hook_scale", "ln1.hook_normalized", "ln2.hook_scale", "ln2.hook_normalized"),  # norms after
    "codegen": ("attn.hook_q", "attn.hook_k", "ln2.hook_scale", "ln2.hook_normalized"),  # sharded projection
    "mixtral": ("mlp.hook_pre", "mlp.hook_post"),  # experts: no one hidden layer
    "olmoe": ("mlp.hook_pre", "mlp.hook_post"),
    "qwen2_moe": ("mlp.hook_pre", "mlp.hook_post"),
}


@pytest.fixture(scope="module")
def type_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("types")
    return {model_type: build_type(model_type, root / model_type) for model_type in TYPES}


@pytest.fixture(scope="module")
def type_runners(type_folders) -> dict:
    return {model_type: load_hf_runner(str(folder)) for model_type, folder in type_folders.items()}


def _eager(runner, folder: Path) -> torch.nn.Module:
    return type(runner.model).from_pretrained(folder, attn_implementation="eager").eval()


@pytest.mark.parametrize("model_type", TYPES)
def test_attention_and_outputs_are_transformers_eager_ones(type_folders, type_runners, model_type: str) -> None:
    """The app's run (its own masks, sliding windows and soft-capping applied by its attention) gives the
    probabilities transformers' eager attention gives under the model's own masks, layer by layer, and the same
    output."""
    runner = type_runners[model_type]
    eager = _eager(runner, type_folders[model_type])
    kind = runner.family.kind
    trace = runner.run(TEXT, TARGET if kind == "encoder-decoder" else None)
    ids = torch.tensor([trace.ids])
    with torch.inference_mode():
        if kind == "encoder-decoder":
            out = eager(input_ids=ids, decoder_input_ids=torch.tensor([trace.target_ids]), output_attentions=True)
            attentions = {"encoder.attn": out.encoder_attentions, "decoder.attn": out.decoder_attentions,
                          "decoder.cross_attn": out.cross_attentions}
            np.testing.assert_array_equal(trace.outputs["predicted_ids"], out.logits[0].argmax(-1).numpy())
        else:
            out = eager(input_ids=ids, output_attentions=True)
            attentions = {f"{'decoder' if kind == 'decoder' else 'encoder'}.attn": out.attentions}
        if kind == "decoder":
            probabilities = out.logits[0, -1].softmax(-1)
            top = trace.outputs["top_next_ids"]
            np.testing.assert_allclose(trace.outputs["top_next_probs"], probabilities[top].numpy(), atol=1e-5)
    for site, layers in attentions.items():
        assert len(layers) == trace.n_layers(site)
        for layer, reference in enumerate(layers):
            pattern = trace.pattern_source(site, layer).pattern(dtype=np.float32)
            np.testing.assert_allclose(pattern, reference[0].numpy(), atol=1e-5, err_msg=f"{site} {layer}")
            np.testing.assert_allclose(trace.pattern(site, layer), reference[0].numpy(), atol=2.5e-4)  # float16


def test_sliding_windows_hide_keys_the_full_layers_see(type_runners) -> None:
    """Gemma 3's first layer slides (3 keys), its second does not: the patterns show it, and the card says it."""
    trace = type_runners["gemma3_text"].run(TEXT)
    sliding, full = (trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32) for layer in (0, 1))
    distance = np.subtract.outer(np.arange(len(trace.ids)), np.arange(len(trace.ids)))  # query - key
    assert (sliding[:, distance >= 3] == 0).all() and (sliding[:, (distance >= 0) & (distance < 3)] > 0).all()
    assert (full[:, distance >= 0] > 0).all()
    assert trace.facts.windows == [3, 0]
    assert trace.facts.notes["sliding-window attention"].startswith("layer 0: each token sees itself and the 2")


@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_decoder_hooks_are_named_and_add_up(type_runners, model_type: str) -> None:
    """Every hook is in the vocabulary; hook_resid_mid = resid_pre + attn_out, and resid_post = resid_mid + mlp_out
    (or, attention and MLP in parallel, resid_pre + attn_out + mlp_out), as TransformerLens means them."""
    runner = type_runners[model_type]
    assert all(in_vocabulary(name) for name in runner.taps)
    assert runner.family.unplaced == NOT_FOUND.get(model_type, ())
    trace = runner.run(TEXT, options=RunOptions(hooks=("*",)))
    c = {k: torch.from_numpy(np.asarray(v)) for k, v in trace.captured.items()}
    for layer in range(2):
        hook = {name: c.get(f"decoder.{layer}.{name}") for name in
                ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")}
        if hook["hook_resid_mid"] is not None:
            torch.testing.assert_close(hook["hook_resid_mid"], hook["hook_resid_pre"] + hook["hook_attn_out"])
            torch.testing.assert_close(hook["hook_resid_post"], hook["hook_resid_mid"] + hook["hook_mlp_out"])
        else:
            torch.testing.assert_close(hook["hook_resid_post"],
                                       hook["hook_resid_pre"] + hook["hook_attn_out"] + hook["hook_mlp_out"])
    last = c["decoder.1.hook_resid_post"]  # what the final norm reads: its mean (LayerNorm) + normalized x scale
    mean = 0 if "RMS" in runner.family.norm else last.mean(-1, keepdim=True)
    torch.testing.assert_close(last, c["decoder.ln_final.hook_normalized"] * c["decoder.ln_final.hook_scale"] + mean)


@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_decoders_generate_the_same_with_and_without_a_cache(type_runners, model_type: str) -> None:
    runner = type_runners[model_type]
    greedy = lambda logits, step: int(logits.argmax())  # noqa: E731
    cached = list(generate(runner.stepper(TEXT, RunOptions()), [], 5, greedy))
    full = list(generate(runner.stepper(TEXT, RunOptions(), use_cache=False), [], 5, greedy))
    assert [s.token_id for s in cached] == [s.token_id for s in full]
    for a, b in zip(cached, full, strict=True):
        np.testing.assert_allclose(a.self_rows, b.self_rows, atol=1e-5)


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_encoder_decoders_write_an_output(type_runners, model_type: str) -> None:
    trace = type_runners[model_type].run(TEXT)
    assert trace.output_kind == "generated" and trace.target_ids


@pytest.mark.parametrize("layout", [{"multi_query": True}, {"multi_query": False}])
def test_falcons_older_layouts_are_its_eager_attention_and_add_up(tmp_path, layout: dict) -> None:
    """Falcon-7B's layout (every query head, then one key and one value head; attention and MLP in parallel after one
    norm) and the one with each head's query, key and value side by side, besides the new decoder architecture of
    DECODER_TYPES: the patterns are eager's, the hooks add up, the heads' weights give the model's queries."""
    config = transformers.FalconConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       ffn_hidden_size=64, bias=True, **layout)
    torch.manual_seed(0)
    transformers.FalconForCausalLM(config).save_pretrained(tmp_path)
    bert_tokenizer().save_pretrained(tmp_path)
    runner = load_hf_runner(str(tmp_path))
    assert runner.facts.n_kv_heads == (1 if layout["multi_query"] else 4)
    assert runner.family.unplaced == ("ln2.hook_scale", "ln2.hook_normalized")  # one norm before both
    trace = runner.run(TEXT, options=RunOptions(hooks=("*",)))
    eager = transformers.FalconForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.inference_mode():
        reference = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True).attentions
    c = {k: torch.from_numpy(np.asarray(v)) for k, v in trace.captured.items()}
    for layer in range(2):
        np.testing.assert_allclose(trace.pattern_source("decoder.attn", layer).pattern(dtype=np.float32),
                                   reference[layer][0].numpy(), atol=1e-5)
        hook = lambda name: c[f"decoder.{layer}.{name}"]  # noqa: B023, E731
        torch.testing.assert_close(hook("hook_resid_post"),
                                   hook("hook_resid_pre") + hook("hook_attn_out") + hook("hook_mlp_out"))
    weights = head_weights(runner, "decoder.attn", 0, 3, len(trace.ids), len(trace.ids))
    norm = runner.model.transformer.h[0].input_layernorm
    normalized = c["decoder.0.ln1.hook_normalized"].numpy() * norm.weight.detach().numpy() + norm.bias.detach().numpy()
    for projection, hook, head in ((weights.w_q, "hook_q", 3), (weights.w_v, "hook_v", weights.kv_head)):
        bias = weights.b_q if hook == "hook_q" else weights.b_v
        np.testing.assert_allclose(normalized @ projection + bias, c[f"decoder.0.attn.{hook}"][head], atol=1e-5)


@pytest.mark.parametrize(("config", "reason"), [
    (transformers.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True),
     "ALiBi"),  # Falcon-RW
    (transformers.XLNetConfig(d_model=32, n_layer=2, n_head=4, d_inner=64),
     "computes attention in its own code"),  # no adapter
    (transformers.DebertaV2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  relative_attention=True, pos_att_type=["c2p", "p2c"], conv_kernel_size=3),
     "a convolution"),  # DeBERTa-v2 xlarge's layout
    (transformers.LEDConfig(d_model=32, encoder_layers=1, decoder_layers=1), "is not supported"),  # no table
])
def test_a_type_whose_attention_cannot_be_read_says_why(tmp_path, config, reason: str) -> None:
    config.vocab_size = 40
    if config.model_type == "led":  # refused from its config alone
        config.save_pretrained(tmp_path)
    else:
        model_class = transformers.AutoModel if config.model_type == "deberta-v2" else transformers.AutoModelForCausalLM
        model_class.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=reason):
        load_hf_runner(str(tmp_path))


def test_the_docs_table_of_types_is_what_the_app_finds(runners, type_runners) -> None:
    """docs/models.md lists every type tested, each row as the app describes the model it opened (these first; the
    other builders' types after them, tests/model/test_models_table.py)."""
    found = {**runners, **type_runners}
    expected = [f"| `{t}` | " + " | ".join(description(found[t].facts, found[t].family).values()) + " |"
                for t in (*FAMILIES, *TYPES)]
    rows = [line for line in MODELS_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    assert rows[:len(expected)] == expected, "\n".join(expected)


def test_a_layout_no_rule_fits_opens_with_its_attention_and_no_hook_that_means_another_thing(tmp_path) -> None:
    """ELECTRA: a BERT-style post-norm encoder that no table describes. Its attention is read (equal to eager); its
    blocks normalise their sums inside their parts, so no residual hook adds up and none is placed (a block's output,
    normalised, is still the next block's hook_resid_pre), and the model card lists what is missing."""
    config = transformers.ElectraConfig(vocab_size=24, embedding_size=32, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=64)
    transformers.ElectraModel(config).save_pretrained(tmp_path)
    bert_tokenizer().save_pretrained(tmp_path)
    runner = load_hf_runner(str(tmp_path))
    assert {"hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"} <= set(runner.family.unplaced)
    assert not any(name.endswith(("hook_attn_out", "hook_resid_post")) for name in runner.taps)
    trace = runner.run(TEXT)
    eager = transformers.ElectraModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.inference_mode():
        reference = eager(input_ids=torch.tensor([trace.ids]), output_attentions=True).attentions
    for layer in range(2):
        np.testing.assert_allclose(trace.pattern_source("encoder.attn", layer).pattern(dtype=np.float32),
                                   reference[layer][0].numpy(), atol=1e-5)
    assert "hook_resid_post" in trace.facts.notes["hooks not found"]


@pytest.mark.parametrize("model_type", TYPES)
def test_a_bfloat16_model_has_its_hooks_where_float32_has_them(type_folders, type_runners, model_type: str) -> None:
    """Discovery compares the probe's values up to the model's own rounding: in bfloat16 (a GPU's precision) every
    hook is placed, at the same module with the same reader, as in float32."""
    half = load_hf_runner(str(type_folders[model_type]), precision=torch.bfloat16)
    assert half.family.layer_taps == type_runners[model_type].family.layer_taps
    assert half.family.stack_taps == type_runners[model_type].family.stack_taps
