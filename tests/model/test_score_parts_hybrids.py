"""A score taken apart where the stream holds more than heads and MLPs, or a head's write more than z · W_O
(model/inspect/stream_walk.py): every hybrid's blocks of other kinds as parts, each side adding up to transformers'
eager scores (Granite 4's and Falcon-H1's multipliers set away from 1); and one share of each new layout computed
again from transformers' own modules, each norm's scale frozen at the run's (`frozen`): a Mamba block's write
(Jamba), a head that Granite 4, a dense Granite and Falcon-H1 add scaled (what zeroing it changes), a head through
Gemma 2's and OLMo 2's norm after attention, a gated head (Qwen3-Next), latent attention's key (DeepSeek-V2). Shares
are taken at query and key 0, where the rotation turns nothing, so a key's part is what the model's own modules make
of it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention.arrays import as_tensor
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.score_parts import explain_score
from attention_atlas.model.inspect.score_setup import score_options
from tests.model.test_hybrid_stream import build_scaled_dense
from tests.model.test_score_parts_models import TEXT, rows_against_eager
from tests.tiny_hf import build_type
from tests.tiny_hybrids import HYBRID_TYPES, build_hybrid
from tests.transformer_lens_reference import randomise_norms

MULTIPLIERS = {"granitemoehybrid": {"residual_multiplier": 0.6},
               "falcon_h1": {"attention_in_multiplier": 0.7, "key_multiplier": 1.4, "attention_out_multiplier": 0.6,
                             "ssm_out_multiplier": 0.8}}
SCALED = (*MULTIPLIERS, "granite")  # blocks that add attention scaled (a dense Granite's by 0.22: build_scaled_dense)
OTHER_BLOCKS = {"qwen3_next": "gated delta-net", "qwen3_5_text": "gated delta-net", "jamba": "Mamba",
                "granitemoehybrid": "Mamba", "kimi_linear": "Kimi delta attention", "lfm2": "short convolution"}


def build_model(model_type: str, folder: Path) -> Path:
    """A tiny hybrid (its config's multipliers as MULTIPLIERS sets them), a dense Granite or another tiny model type."""
    if model_type == "granite":
        return build_scaled_dense(model_type, folder)
    if model_type not in HYBRID_TYPES:
        return build_type(model_type, folder)
    build_hybrid(model_type, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | MULTIPLIERS.get(model_type, {})))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """model type -> its folder, each built once when first asked for."""
    root, built = tmp_path_factory.mktemp("score-parts"), {}

    def folder(model_type: str) -> Path:
        if model_type not in built:
            built[model_type] = build_model(model_type, root / model_type)
        return built[model_type]

    return folder


@pytest.mark.slow  # eight hybrids built, run and run again in transformers' eager attention
@pytest.mark.parametrize("model_type", list(HYBRID_TYPES))
def test_each_side_of_a_hybrids_score_adds_up_to_transformers_own(folders, model_type: str) -> None:
    row = rows_against_eager(folders(model_type), "decoder.attn", 1)
    blocks = [name for name in row.key_parts if name.startswith("block ")]
    expected = {"falcon_h1": [], "nemotron_h": ["block 0 (Mamba)", "block 2 (MLP)"]}.get(
        model_type, [f"block {b} ({OTHER_BLOCKS.get(model_type)})" for b in (0, 2)])
    assert blocks == expected
    scaled = model_type in SCALED  # no sum of attention's output recorded: its heads, then the rest
    assert ("L0.rest" in row.key_parts) == scaled
    assert ("L0.mlp" in row.key_parts) == (not scaled and model_type != "nemotron_h")  # Nemotron-H's: no MLP
    assert {f"L0H{h}" for h in range(4)} <= set(row.key_parts)


def frozen(norm: torch.nn.Module, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """An RMSNorm (no bias) of v with its scale frozen at what it is for x: norm(v) x rms(v) / rms(x)."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))

    def rms(a: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(a.pow(2).mean(-1, keepdim=True) + eps)

    return norm(v) * rms(v) / rms(x)


def linear(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A projection's linear part (its bias left out): what it makes of a part of its input."""
    return module(x) - module(torch.zeros_like(x))


def captured(model: torch.nn.Module, ids: list[int], inputs: dict, outputs: dict, zeroed=None) -> tuple:
    """(hidden states, {name: (len, d) the input of inputs[name] or the output of outputs[name]}) of one forward pass
    on `ids`; `zeroed` = (module, columns): those columns of that module's input zeroed first."""
    values: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module, args, kwargs, *out):
            value = out[0] if out else (args[0] if args else kwargs["hidden_states"])
            values[name] = (value[0] if isinstance(value, tuple) else value)[0].detach().clone()
        return hook

    handles = [m.register_forward_pre_hook(keep(n), with_kwargs=True) for n, m in inputs.items()]
    handles += [m.register_forward_hook(keep(n), with_kwargs=True) for n, m in outputs.items()]
    if zeroed is not None:
        handles.append(zeroed[0].register_forward_pre_hook(lambda _, args: (only(args[0], zeroed[1], False),)))
    try:
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False).hidden_states
    finally:
        for handle in handles:
            handle.remove()
    return hidden, values


def only(x: torch.Tensor, columns: slice, keep: bool = True) -> torch.Tensor:
    """x with every column but `columns` zeroed (keep), or those columns zeroed."""
    inside = torch.zeros(x.shape[-1], dtype=torch.bool)
    inside[columns] = True
    return torch.where(inside if keep else ~inside, x, torch.zeros_like(x))


def part_write(model: torch.nn.Module, model_type: str, part: str, ids: list[int]) -> torch.Tensor:
    """(d_model,) what `part` adds to the stream at position 0, from the model's own modules: a block's output less its
    input; an MLP's output; a head of the first attention layer: what zeroing its z changes in the stream after
    attention (Granite 4 and Falcon-H1 add it scaled), or its z alone through o_proj (gated first: Qwen3-Next),
    then through the norm after attention, that norm's scale frozen at the whole output's (Gemma 2, OLMo 2)."""
    layers = model.model.layers
    if part.startswith("block "):
        hidden, _ = captured(model, ids, {}, {})
        block = int(part.split()[1])
        return hidden[block + 1][0, 0] - hidden[block][0, 0]
    if part == "L0.mlp":
        return captured(model, ids, {}, {"mlp": layers[0].mlp})[1]["mlp"][0]
    block = layers[1] if model_type in ("granitemoehybrid", "qwen3_next") else layers[0]
    o_proj, head = block.self_attn.o_proj, int(part[-1])
    width = o_proj.in_features // model.config.num_attention_heads
    columns = slice(head * width, (head + 1) * width)
    if model_type in SCALED:
        mid = block.pre_ff_layernorm if model_type == "falcon_h1" else block.post_attention_layernorm
        kept, zeroed = (captured(model, ids, {"mid": mid}, {}, z)[1] for z in (None, (o_proj, columns)))
        return kept["mid"][0] - zeroed["mid"][0]
    _, seen = captured(model, ids, {"z": o_proj}, {"out": o_proj})
    with torch.no_grad():
        alone = linear(o_proj, only(seen["z"][0], columns))
        if model_type in ("gemma2", "olmo2"):
            return frozen(block.post_attention_layernorm, alone, seen["out"][0])
    return alone


def key_part(model: torch.nn.Module, model_type: str, v: torch.Tensor, ids: list[int], head: int) -> torch.Tensor:
    """(d_head,) the key of `head` of the second attention layer at position 0 made of v (d_model,) alone, each norm's
    scale frozen at what it is there: the input norm's (none in OLMo 2), the key norm's, the latent's (DeepSeek-V2);
    Falcon-H1's multipliers of attention's input and keys."""
    layers, config = model.model.layers, model.config
    block = layers[3] if model_type in HYBRID_TYPES and model_type != "falcon_h1" else layers[1]
    hidden, _ = captured(model, ids, {}, {})
    stream = hidden[list(layers).index(block)][0, 0]  # (d_model,) what the block reads at position 0
    attention = block.self_attn
    with torch.no_grad():
        x, read = (v, stream) if model_type == "olmo2" else (frozen(block.input_layernorm, v, stream),
                                                             block.input_layernorm(stream))
        x, read = (x * config.attention_in_multiplier, read * config.attention_in_multiplier) \
            if model_type == "falcon_h1" else (x, read)
        if model_type == "deepseek_v2":
            rank, nope = attention.kv_lora_rank, attention.qk_nope_head_dim
            both, true = linear(attention.kv_a_proj_with_mqa, x), attention.kv_a_proj_with_mqa(read)
            latent = frozen(attention.kv_a_layernorm, both[:rank], true[:rank])
            k_nope = attention.kv_b_proj(latent).view(config.num_attention_heads, -1)[head, :nope]
            return torch.cat([k_nope, both[rank:]])
        k, true = linear(attention.k_proj, x), attention.k_proj(read)  # (kv_heads x d_head,)
        if model_type == "olmo2":
            k = frozen(attention.k_norm, k, true)  # its RMS over every head's keys
        d_head = k.shape[0] // config.num_key_value_heads
        kv = slice(head // (config.num_attention_heads // config.num_key_value_heads) * d_head, None)
        k, true = k[kv][:d_head], true[kv][:d_head]
        if model_type == "qwen3_next":
            k = frozen(attention.k_norm, k, true)
        return k * (config.key_multiplier if model_type == "falcon_h1" else 1.0)


CASES = [  # (model type, the part of layer 1's key computed again)
    ("jamba", "block 2 (Mamba)"),
    ("granitemoehybrid", "L0H1"),
    ("granite", "L0H1"),  # dense: every block adds attention and the MLP scaled, read block by block
    ("falcon_h1", "L0H1"),
    ("gemma2", "L0H1"),
    ("olmo2", "L0H1"),
    ("qwen3_next", "L0H1"),
    ("deepseek_v2", "L0.mlp"),
]


@pytest.mark.parametrize(("model_type", "part"), CASES, ids=lambda v: str(v))
def test_a_key_share_is_computed_again_from_the_models_own_modules(folders, model_type: str, part: str) -> None:
    runner = load_hf_runner(str(folders(model_type)))
    randomise_norms(runner.model)
    trace = runner.run(TEXT, options=score_options(runner, "decoder.attn", 1))
    source = trace.pattern_source("decoder.attn", 1)
    head = 2
    query = as_tensor(source.query, torch.device("cpu"))[head, 0].double()  # (d_head,) the model's own, unrotated
    k = key_part(runner.model, model_type, part_write(runner.model, model_type, part, trace.ids), trace.ids, head)
    theirs = source.scale * float(query @ k.double())
    found = explain_score(runner, trace, "decoder.attn", 1, head, 0, 0)
    size = max(abs(found.score), float(np.abs(found.key_shares).sum()))
    assert found.key_shares[found.key_parts.index(part)] == pytest.approx(theirs, abs=1e-4 * size)
    assert abs(theirs) > 1e-3 * size  # a part that is there


def test_a_block_that_writes_more_than_its_attention_and_mlp_is_refused(folders) -> None:
    """Jamba's attention block 1 records its attention's and its MLP's sums: its write changed after the run is no
    longer theirs, and nothing says what the difference is."""
    runner = load_hf_runner(str(folders("jamba")))
    trace = runner.run(TEXT, None, score_options(runner, "decoder.attn", 1))
    after = trace["decoder.blocks.1.hook_resid_post"] + np.linspace(-1, 1, 32, dtype=np.float32)
    changed = dataclasses.replace(trace, captured={**trace.captured, "decoder.blocks.1.hook_resid_post": after})
    with pytest.raises(UserError, match=r"block 1 writes more to the residual stream than its attention and MLP"):
        explain_score(runner, changed, "decoder.attn", 1, 0, 5, 2)


def test_a_block_that_adds_attention_by_a_factor_not_known_is_refused(folders, monkeypatch) -> None:
    """Granite 4's attention blocks record no sum of what attention writes; without the factor they add it by, its
    heads' writes are not known."""
    runner = load_hf_runner(str(folders("granitemoehybrid")))
    trace = runner.run(TEXT, None, score_options(runner, "decoder.attn", 1))
    monkeypatch.setattr("attention_atlas.model.inspect.stream_walk.attention_write_scale", lambda runner: None)
    with pytest.raises(UserError, match=r"block 1 records no sum of what its attention writes, and the factor"):
        explain_score(runner, trace, "decoder.attn", 1, 0, 5, 2)
    monkeypatch.undo()
    assert "L0.rest" in explain_score(runner, trace, "decoder.attn", 1, 0, 5, 2).key_parts
