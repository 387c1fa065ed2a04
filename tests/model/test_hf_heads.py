"""Per-head attention hooks (q, k, v, rot_q, rot_k, attn_scores, z) of every Hugging Face family and of the
from-scratch models: they recompose into the pattern and the attention output, and cost nothing unless asked."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import transformers

from attention_atlas.model.core.capture.record import Captured, capture
from attention_atlas.model.core.masks import additive_mask
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf import heads
from attention_atlas.model.hf.heads import ATTENTION, hides_ahead, register_attention
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import FAMILIES

TEXT, TARGET = "the quick brown fox jumps over the lazy dog", "the cat sat on the mat"
OUTPUT_PROJECTION = {  # family -> attention site ("attn" / "cross_attn") -> W_O's module path ("{stack}", "{i}")
    "bert": {"attn": "encoder.layer.{i}.attention.output.dense"},
    "gpt2": {"attn": "h.{i}.attn.c_proj"},
    "llama": {"attn": "layers.{i}.self_attn.o_proj"},
    "t5": {"attn": "{stack}.block.{i}.layer.0.SelfAttention.o",
           "cross_attn": "decoder.block.{i}.layer.1.EncDecAttention.o"},
    "bart": {"attn": "{stack}.layers.{i}.self_attn.out_proj",
             "cross_attn": "decoder.layers.{i}.encoder_attn.out_proj"},
}
OUTPUT_PROJECTION["marian"] = OUTPUT_PROJECTION["bart"]
TOY_OUTPUT_PROJECTION = {"attn": "{stack}.layers.{i}.attn.out_proj",
                         "cross_attn": "{stack}.layers.{i}.cross_attn.out_proj"}


def _padded_trace(runner) -> Trace:
    """Every hook, with padding so that the masks hide some keys; encoder-decoders read a given target."""
    n = len(runner.tokenizer(TEXT)["input_ids"])
    target = TARGET if runner.family.kind == "encoder-decoder" else None
    return runner.run(TEXT, target, RunOptions(hooks=("*",), pad_to=n + 3))


def _attention_sites(trace: Trace) -> list[tuple[str, str, str, int]]:
    """(hook prefix, mask site, attention site, layer) of every attention in the trace, e.g.
    ('decoder.1.cross_attn', 'decoder.cross_attn', 'cross_attn', 1)."""
    sites = []
    for name in trace.attention:
        if name.endswith(".hook_pattern"):
            stack, layer, attn, _ = name.split(".")
            sites.append((name.removesuffix(".hook_pattern"), f"{stack}.{attn}", attn, int(layer)))
    return sites


def _values(trace: Trace) -> dict[str, torch.Tensor]:
    """Every captured value as a tensor, patterns kept as sources computed in float32."""
    values = {k: torch.from_numpy(np.asarray(v)) for k, v in trace.captured.items()}
    return values | {k: torch.from_numpy(s.pattern(dtype=np.float32)) for k, s in trace.pattern_sources.items()}


def _check_scores_and_z(trace: Trace, projection: dict[str, str], model: torch.nn.Module) -> None:
    """softmax(scores where the mask allows) = pattern; z through W_O (+ bias) = what attention adds."""
    c = _values(trace)
    sites = _attention_sites(trace)
    assert sites
    for prefix, mask_site, attn, layer in sites:
        scores, pattern = c[f"{prefix}.hook_attn_scores"], c[f"{prefix}.hook_pattern"]  # (heads, q, k)
        assert pattern.dtype == torch.float32
        allowed = torch.from_numpy(np.array(trace.masks[mask_site]))  # (q, k), True = may attend; a copy of a view
        assert not allowed.all()  # padding (or causality) hides some keys
        expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        torch.testing.assert_close(pattern, expected, atol=1e-5, rtol=0, msg=prefix)
        z = c[f"{prefix}.hook_z"]  # (heads, pos, d_head)
        heads, pos, d_head = z.shape
        kv_heads = c[f"{prefix}.hook_k"].shape[0]
        assert c[f"{prefix}.hook_q"].shape == (heads, pos, d_head)
        assert c[f"{prefix}.hook_k"].shape == c[f"{prefix}.hook_v"].shape == (kv_heads, scores.shape[-1], d_head)
        stack = prefix.split(".")[0]
        w_o = model.get_submodule(projection[attn].format(stack=stack, i=layer))
        with torch.inference_mode():
            out = w_o(z.transpose(0, 1).reshape(pos, heads * d_head))  # (pos, d_model)
        out_name = f"{stack}.{layer}.hook_{'cross_attn' if attn == 'cross_attn' else 'attn'}_out"
        torch.testing.assert_close(out, c[out_name], atol=1e-5, rtol=0, msg=prefix)


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_and_mask_give_the_pattern_and_z_gives_attn_out(runners, family: str) -> None:
    runner = runners[family]
    trace = _padded_trace(runner)
    assert {name.split(".")[-1] for name in trace.captured} >= {"hook_q", "hook_attn_scores", "hook_z"}
    _check_scores_and_z(trace, OUTPUT_PROJECTION[family], runner.model.base_model)


@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date"])
def test_the_from_scratch_models_recompose_the_same_way(model_id: str) -> None:
    runner = load_runner(model_id)
    text = runner.examples[0]
    trace = runner.run(text, options=RunOptions(hooks=("*",), pad_to=len(runner.toy.encode_source(text)) + 3))
    _check_scores_and_z(trace, TOY_OUTPUT_PROJECTION, runner.toy.model)


def test_rotary_scores_are_the_rotated_queries_and_shared_keys(runners) -> None:
    """Llama (4 query heads, 2 kv heads): scores = rot_q rot_k^T / sqrt(d_head), query head h reading kv head
    h // 2; hook_q/hook_k are before the rotation (equal at position 0, same norms, different elsewhere)."""
    runner = runners["llama"]
    c = _values(_padded_trace(runner))
    for layer in range(2):
        prefix = f"decoder.{layer}.attn"
        rot_q, rot_k = c[f"{prefix}.hook_rot_q"], c[f"{prefix}.hook_rot_k"]  # (4, pos, d), (2, pos, d)
        assert rot_q.shape[0] == 4 and rot_k.shape[0] == c[f"{prefix}.hook_v"].shape[0] == 2
        shared = rot_k[torch.arange(4) // 2]  # (4, pos, d): the kv head each query head reads
        scores = rot_q @ shared.transpose(1, 2) * rot_q.shape[-1] ** -0.5
        torch.testing.assert_close(scores, c[f"{prefix}.hook_attn_scores"], atol=1e-5, rtol=0)
        for before, after in ((c[f"{prefix}.hook_q"], rot_q), (c[f"{prefix}.hook_k"], rot_k)):
            torch.testing.assert_close(before[:, 0], after[:, 0])
            torch.testing.assert_close(before.norm(dim=-1), after.norm(dim=-1))
            assert not torch.allclose(before[:, 1:], after[:, 1:])


def test_t5_scores_include_the_relative_position_bias(runners) -> None:
    runner = runners["t5"]
    c = _values(_padded_trace(runner))
    q, k = c["encoder.0.attn.hook_q"], c["encoder.0.attn.hook_k"]  # T5 does not scale q k^T
    bias = c["encoder.0.attn.hook_attn_scores"] - q @ k.transpose(1, 2)  # (heads, q, k)
    attention = runner.model.encoder.block[0].layer[0].SelfAttention
    with torch.inference_mode():
        expected = attention.compute_bias(q.shape[1], k.shape[1])[0]
    torch.testing.assert_close(bias, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_default_run_captures_no_per_head_hook(runners, family: str) -> None:
    trace = runners[family].run(TEXT, options=RunOptions(hooks=("*.hook_pattern",)))
    assert not trace.captured and trace.pattern_sources  # patterns kept as sources, nothing else
    assert all(name.endswith(".hook_pattern") for name in trace.pattern_sources)


@pytest.mark.parametrize("family", FAMILIES)
def test_patterns_and_outputs_equal_eager_ones(folders, runners, family: str) -> None:
    """The fused attention the runners load gives eager's outputs, and the patterns computed from what it kept
    are eager's `output_attentions`, to 1e-5 in float32 (padding and, for encoder-decoders, a target)."""
    runner = runners[family]
    eager = type(runner.model).from_pretrained(folders[family], attn_implementation="eager").eval()
    trace = _padded_trace(runner)
    ids = torch.tensor([trace.ids])
    masks = {site: additive_mask(torch.from_numpy(np.array(mask))[None, None], torch.float32)
             for site, mask in trace.masks.items()}
    with torch.inference_mode():
        if runner.family.kind == "encoder-decoder":
            target = torch.tensor([trace.target_ids])
            real_keys = torch.from_numpy(np.array(trace.masks["decoder.cross_attn"][:1])).long()  # (1, src_len)
            encoded = eager.get_encoder()(input_ids=ids, attention_mask=masks["encoder.attn"], output_attentions=True)
            outputs = [m(input_ids=ids, attention_mask=real_keys, decoder_input_ids=target, use_cache=False,
                         decoder_attention_mask=masks["decoder.attn"], output_attentions=True,
                         encoder_outputs=m.get_encoder()(input_ids=ids, attention_mask=masks["encoder.attn"]))
                       for m in (runner.model, eager)]
            attentions = {"encoder.attn": encoded.attentions, "decoder.attn": outputs[1].decoder_attentions,
                          "decoder.cross_attn": outputs[1].cross_attentions}
        else:
            outputs = [m(input_ids=ids, attention_mask=next(iter(masks.values())), output_attentions=True)
                       for m in (runner.model, eager)]
            attentions = {next(iter(trace.masks)): outputs[1].attentions}
    assert runner.model.config._attn_implementation == ATTENTION
    result = "last_hidden_state" if runner.family.kind == "encoder" else "logits"
    torch.testing.assert_close(outputs[0][result], outputs[1][result], atol=1e-5, rtol=0)
    for site, layers in attentions.items():
        assert len(layers) == trace.n_layers(site)
        for layer, reference in enumerate(layers):
            source = trace.pattern_source(site, layer)
            np.testing.assert_allclose(source.pattern(dtype=np.float32), reference[0].numpy(), atol=1e-5, rtol=0,
                                       err_msg=f"{site} {layer}")


def _causal(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive causal mask of n tokens, (1, 1, n, n)."""
    return additive_mask(torch.ones(n, n, dtype=torch.bool).tril()[None, None], dtype)


def test_only_a_causal_mask_and_nothing_else_hides_ahead() -> None:
    assert hides_ahead(_causal(6)) and hides_ahead(_causal(6, torch.bfloat16))
    assert hides_ahead(_causal(6).masked_fill(_causal(6) < 0, float("-inf")))  # -inf where hidden, as some masks
    padded = _causal(6).clone()
    padded[..., 0] = torch.finfo(torch.float32).min  # the first key is padding
    band = _causal(6).clone()
    band[..., 5, 0] = torch.finfo(torch.float32).min  # a sliding window of 5 hides the first key from the last
    biased = _causal(6).clone()
    biased[..., 3, 1] = -0.5  # a bias added where the key is seen
    half_hidden = _causal(6).clone()
    half_hidden[..., 0, 5] = -1e4  # a key after the query lowered, not hidden
    batch = torch.cat([_causal(6), padded])  # one sequence of two padded
    for mask in (padded, band, biased, half_hidden, batch, _causal(6)[..., :4, :], _causal(1)):
        assert not hides_ahead(mask)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_causal_mask_runs_as_sdpa_causal_with_eager_outputs(folders, runners, family: str, monkeypatch) -> None:
    """A run with a plain causal mask (no padding, no window) asks the fused kernel for its own causal mask,
    which skips the hidden keys, and gives eager's logits; a padded mask goes to it as it is."""
    runner = runners[family]
    eager = type(runner.model).from_pretrained(folders[family], attn_implementation="eager").eval()
    ids = torch.tensor([runner.tokenizer(TEXT)["input_ids"]])
    fused, asked = heads.F.scaled_dot_product_attention, []

    def watched(*args, **kwargs):
        asked.append((kwargs["is_causal"], kwargs["attn_mask"] is None))
        return fused(*args, **kwargs)

    monkeypatch.setattr(heads.F, "scaled_dot_product_attention", watched)
    padded = _causal(ids.shape[1]).clone()
    padded[..., 0] = torch.finfo(torch.float32).min
    padded[..., 0, 0] = 0  # the padding sees itself
    for mask, as_causal in ((_causal(ids.shape[1]), True), (padded, False)):
        asked.clear()
        with torch.inference_mode():
            ours, theirs = (m(input_ids=ids, attention_mask=mask).logits for m in (runner.model, eager))
        assert asked and set(asked) == {(as_causal, as_causal)}
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_gpt2_upcast_attention_stays_its_own(folders) -> None:
    """GPT-2 configs with reorder_and_upcast_attn take their float32 path under ATTENTION as under eager (the
    same output, to the bit, in bfloat16)."""
    register_attention()
    config = transformers.GPT2Config.from_pretrained(folders["gpt2"], reorder_and_upcast_attn=True)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(30)  # scores large enough that bfloat16 rounds them differently
    model = model.to(torch.bfloat16)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    logits = {}
    for implementation in ("eager", ATTENTION):
        model.set_attn_implementation(implementation)
        with torch.inference_mode():
            logits[implementation] = model(ids).logits
    assert torch.equal(logits["eager"], logits[ATTENTION])


def test_per_head_values_stay_with_the_thread_that_asked(runners) -> None:
    """A capture of reported values only (no forward hooks, so no model lock) while other threads run the same
    model: each thread gets its own values, and a thread that did not ask gets none."""
    runner = runners["gpt2"]
    model, taps = runner.model, runner.taps
    batches = [torch.tensor([runner.tokenizer(text)["input_ids"]]) for text in (TEXT, "the cat sat", "a dog")]

    def heads(ids: torch.Tensor) -> dict[str, Captured]:
        return capture(model, taps, "*.attn.hook_z", lambda: model(input_ids=ids))[1]

    serial = [heads(ids) for ids in batches]
    results: dict[tuple[int, int], dict[str, Captured]] = {}
    plain: list[dict[str, Captured]] = []

    def work(k: int) -> None:
        for r in range(5):
            results[k, r] = heads(batches[k])
            plain.append(capture(model, taps, "*.hook_resid_post", lambda: model(input_ids=batches[0]))[1])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (k, _), got in results.items():
        assert sorted(got) == ["decoder.0.attn.hook_z", "decoder.1.attn.hook_z"]
        for name, value in got.items():
            np.testing.assert_array_equal(value, serial[k][name])
    assert all(sorted(p) == ["decoder.0.hook_resid_post", "decoder.1.hook_resid_post"] for p in plain)



def test_a_heads_weights_read_from_the_model_cannot_be_written_into_it(folders) -> None:
    """`affine` hands out the model's own float32 memory (no copy): read-only, so that no reader can change the model
    every session shares."""
    from attention_atlas.model.hf.families.adapter import affine
    from attention_atlas.model.hf.loading import load_hf_runner

    runner = load_hf_runner(str(folders["llama"]))
    weight, _ = affine(runner.model.base_model.layers[0].self_attn.o_proj)
    before = runner.model.base_model.layers[0].self_attn.o_proj.weight.detach().clone()
    with pytest.raises(ValueError, match="read-only"):
        weight[0, 0] = 1.0
    assert torch.equal(runner.model.base_model.layers[0].self_attn.o_proj.weight, before)
