"""Blocks of attention rows sized per device (model/core/attention/source.py `block_rows`), the torch ops a GPU runs
checked on the CPU: the same numbers at any block size, no wait for the device a block, and bfloat16 matrix products
within bfloat16's tolerance of eager attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention import source as patterns
from attention_atlas.model.core.attention.layer_inputs import PatternInputs
from attention_atlas.model.core.attention.scratch import Scratch
from attention_atlas.model.core.attention.source import PatternSource, block_rows, kept_dtype
from attention_atlas.model.core.attention.summary import SiteSummariser, SiteSummary

GiB = 1 << 30


@pytest.fixture
def torch_ops(monkeypatch) -> None:
    """The torch ops a GPU runs, here on the CPU (the native kernel set aside)."""
    monkeypatch.setattr(native, "attention_rows", lambda: None)


def test_the_cpu_keeps_its_blocks_and_cuda_sizes_them_from_its_free_memory() -> None:
    for device in ("cpu", "mps"):
        assert block_rows(device, 9, 2048) == 128  # 9 x 128 x 2,048 float32: 9 MiB, under 32
        assert block_rows(device, 9, 8192, 80 * GiB) == (32 << 20) // (4 * 9 * 8192) == 113
        assert block_rows(device, 32, 65536) == 16  # never fewer
        assert block_rows(device, 12, 512, every_key_seen=True) == 512  # no hidden keys to skip: fewer, larger blocks
        assert block_rows(device, 9, 8192, every_key_seen=True) == 113  # as many bytes at most
    # 80 GiB free: a quarter is over the 1 GiB cap; 1 GiB of working memory is 4 float32 blocks of 256 MiB
    assert block_rows("cuda", 9, 8192, 80 * GiB) == (GiB // 4) // (4 * 9 * 8192) == 910
    assert block_rows("cuda", 9, 2048, 80 * GiB) == 3640  # more rows than a 2,048-token text: one block a layer
    assert block_rows("cuda", 9, 512, 80 * GiB) == 8192  # the rows' cap
    assert block_rows("cuda", 32, 8192, 2 * GiB) == (GiB // 2 // 4) // (4 * 32 * 8192) == 128  # a quarter of 2 GiB
    assert block_rows("cuda", 32, 8192, 0) == 16
    assert block_rows("cuda", 9, 2048, None) == 128  # free memory unknown: the CPU's


def test_the_sizes_read_their_settings_when_called(monkeypatch) -> None:
    """bench.gpu_capture's BENCH_BLOCKS and the tests set them."""
    monkeypatch.setattr(patterns, "ROW_BLOCK", 64)
    monkeypatch.setattr(patterns, "DEVICE_ROW_BLOCK", 512)
    monkeypatch.setattr(patterns, "DEVICE_BLOCK_BYTES", 64 << 20)
    assert block_rows("cpu", 4, 256) == 64
    assert block_rows("cuda", 4, 256, 80 * GiB) == 512
    assert block_rows("cuda", 4, 8192, 80 * GiB) == (16 << 20) // (4 * 4 * 8192) == 128


def test_bfloat16_is_kept_where_a_gpu_multiplies_in_it() -> None:
    assert kept_dtype(torch.bfloat16, torch.device("cuda")) == torch.bfloat16
    assert kept_dtype(torch.bfloat16, torch.device("mps")) == torch.bfloat16
    assert kept_dtype(torch.bfloat16, torch.device("cpu")) == torch.float32  # the native kernel reads float32
    assert kept_dtype(torch.float16, torch.device("cuda")) == torch.float32
    assert kept_dtype(torch.float32, torch.device("cuda")) == torch.float32
    query, key = torch.randn(1, 2, 5, 4, dtype=torch.bfloat16), torch.randn(1, 1, 5, 4, dtype=torch.bfloat16)
    source = PatternInputs(query, key, key, 0.5, None, None).source({})
    assert source.query.dtype == source.key.dtype == torch.float32 and source.products_dtype == torch.float32


def inputs(n: int, heads: int = 4, kv_heads: int = 2, d_head: int = 8, dtype: torch.dtype = torch.float32,
           seed: int = 0, blind_row: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query (heads, n, d), key and value (kv_heads, n, d), a causal mask (n, n), row 5 seeing no key if
    `blind_row`)."""
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(h, n, d_head, generator=generator) for h in (heads, kv_heads, kv_heads))
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    if blind_row:
        allowed[5] = False  # eager attention makes it uniform over every key
    return query.mul(2).to(dtype), key.to(dtype), value.to(dtype), allowed


def summarise_layers(sources: list[PatternSource], value: torch.Tensor, scratch: Scratch
                     ) -> tuple[SiteSummary, list[torch.Tensor]]:
    """Every source's layer summarised, as a capture's run does, with each layer's attention output."""
    summariser = SiteSummariser(sources[0].shape, 64, True)
    outputs = []
    for source in sources:
        output = torch.empty(*source.shape[:2], value.shape[-1], dtype=source.products_dtype)
        summariser.add_layer(source.reduced_rows(summariser.layout, value, output, scratch))
        outputs.append(output)
    return summariser.result(), outputs


def test_small_and_large_blocks_give_the_same_patterns_summaries_and_outputs(monkeypatch, torch_ops) -> None:
    """300 rows in blocks of 16 and in one block, 64 thumbnail columns of unequal widths, a row seeing no key."""
    n = 300
    query, key, value, allowed = inputs(n)
    source = PatternSource(query=query, key=key, scale=0.35, allowed=allowed)
    runs = []
    for rows in (16, 4096):
        monkeypatch.setattr(patterns, "ROW_BLOCK", rows)
        monkeypatch.setattr(patterns, "BLOCK_BYTES", 1 << 40)
        summary, (output,) = summarise_layers([source], value, Scratch())
        runs.append((source.pattern(dtype=np.float32), summary, output))
    (p_small, small, out_small), (p_large, large, out_large) = runs
    scores = (query.double() @ key.double().repeat_interleave(2, 0).transpose(1, 2)) * 0.35
    expected = torch.softmax(scores.masked_fill(~allowed, torch.finfo(torch.float64).min), -1).numpy()
    np.testing.assert_allclose(p_small, expected, atol=1e-6)
    assert (p_small[:, 5] == np.float32(1 / n)).all() and (p_small[:, 6, 7:] == 0).all()
    for got, wanted in ((p_large, p_small), (out_large, out_small), (large.thumbnails, small.thumbnails),
                        (large.statistics, small.statistics), *zip(large.layer_flows, small.layer_flows, strict=True)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(wanted), rtol=1e-6, atol=1e-7)


def test_a_layer_never_waits_for_the_device(monkeypatch, torch_ops) -> None:
    """After a first layer (spans found, indices sent), a second is summarised with every call that would make a
    host wait for a GPU forbidden: no value read back, no host array sent, no boolean test of a tensor."""
    monkeypatch.setattr(patterns, "ROW_BLOCK", 32)
    n = 300
    query, key, value, allowed = inputs(n, blind_row=False)
    first = PatternSource(query=query, key=key, scale=0.35, allowed=allowed)
    second = PatternSource(query=query.flip(1), key=key, scale=0.35, allowed=allowed)  # the same mask
    scratch, summariser = Scratch(), SiteSummariser(first.shape, 64, True)
    output = torch.empty(4, n, 8)
    summariser.add_layer(first.reduced_rows(summariser.layout, value, output, scratch))

    def forbidden(*args, **kwargs):
        raise AssertionError("a host wait for the device")

    with monkeypatch.context() as waits:
        for method in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero"):
            waits.setattr(torch.Tensor, method, forbidden)
        waits.setattr(torch, "from_numpy", forbidden)
        summariser.add_layer(second.reduced_rows(summariser.layout, value, output, scratch))
    summary = summariser.result()
    assert summary.thumbnails.shape == (2, 4, 64, 64) and summary.layer_flows[1].ndim == 1  # causal: a triangle
    assert np.isfinite(summary.statistics[..., [0, 2, 4]]).all()


def test_bfloat16_products_stay_within_bfloat16_of_eager_attention(torch_ops) -> None:
    """A bfloat16 model's layer output made from its blocks, Q K^T and P V in bfloat16, the softmax and the sums in
    float32, against transformers' eager attention in bfloat16 and the float64 softmax; float32 inputs take float32
    products, to 1e-5 of float64."""
    n, scale = 200, 0.35
    query, key, value, allowed = inputs(n, dtype=torch.bfloat16, seed=1)
    module = torch.nn.Module().eval()
    module.num_key_value_groups = 2
    additive = torch.zeros(n, n, dtype=torch.bfloat16).masked_fill(~allowed, torch.finfo(torch.bfloat16).min)
    eager, _ = eager_attention_forward(module, query[None], key[None], value[None], additive[None, None], scale)
    eager = eager[0].transpose(0, 1).double()  # (heads, n, d_head)
    scores = (query.double() @ key.double().repeat_interleave(2, 0).transpose(1, 2)) * scale
    exact_p = torch.softmax(scores.masked_fill(~allowed, torch.finfo(torch.float64).min), -1)
    exact = exact_p @ value.double().repeat_interleave(2, 0)

    scratch = Scratch()
    bf16_source = PatternSource(query=query, key=key, scale=scale, allowed=allowed)
    summary, (output,) = summarise_layers([bf16_source], value, scratch)
    assert bf16_source.products_dtype == output.dtype == scratch._memory[2].dtype == torch.bfloat16
    ours = output.double()
    eager_error = (eager - exact).abs().max().item()
    assert 0 < eager_error < 0.05
    assert (ours - exact).abs().max().item() <= 1.5 * eager_error
    np.testing.assert_allclose(ours.numpy(), eager.numpy(), atol=0.05)
    np.testing.assert_allclose(bf16_source.pattern(dtype=np.float32), exact_p.numpy(), atol=1e-6)  # exact, as ever

    float_scratch = Scratch()
    float_source = PatternSource(query=query.float(), key=key.float(), scale=scale, allowed=allowed)
    float_summary, (float_output,) = summarise_layers([float_source], value.float(), float_scratch)
    assert float_output.dtype == torch.float32 and float_scratch._memory[2] is None  # no bfloat16 copy made
    np.testing.assert_allclose(float_output.numpy(), exact.numpy(), atol=1e-5)
    assert not torch.equal(output.float(), float_output)  # the bfloat16 products were used
    np.testing.assert_allclose(summary.statistics, float_summary.statistics, rtol=0.02, atol=0.02)
    np.testing.assert_allclose(summary.thumbnails, float_summary.thumbnails, atol=0.02)


def test_a_gpus_blocks_keep_their_scratch_within_its_budget(monkeypatch, torch_ops) -> None:
    """CUDA's sizes (here with 1 MiB of working memory), on the CPU's torch ops with bfloat16 products: the scratch
    the blocks are computed in stays within the working memory."""
    monkeypatch.setattr(patterns, "DEVICE_BLOCK_BYTES", 1 << 20)

    def as_on_cuda(_: str, heads: int, k_len: int, free: int | None, every_key_seen: bool = False) -> int:
        return block_rows("cuda", heads, k_len, 80 * GiB)

    monkeypatch.setattr(patterns, "block_rows", as_on_cuda)
    n = 400
    query, key, value, allowed = inputs(n, dtype=torch.bfloat16)
    source = PatternSource(query=query, key=key, scale=0.35, allowed=allowed)
    scratch = Scratch()
    _, (output,) = summarise_layers([source], value, scratch)
    step = block_rows("cuda", 4, n, 80 * GiB)
    assert step == (1 << 18) // (4 * 4 * n) == 40
    held = sum(memory.numel() * memory.element_size() for memory in scratch._memory)
    assert held == 4 * step * n * (4 + 4 + 2) <= 1 << 20  # float32 scores and probabilities, bfloat16 products
    assert torch.isfinite(output.float()).all()
