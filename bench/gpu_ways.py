"""The models bench/gpu_capture.py measures and the ways it runs them (sdpa, the app's capture, eager ...), with what
a CUDA GPU shows of them: the fused kernels torch may use, the capture's blocks, the host synchronisations."""

from __future__ import annotations

import gc
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

SHAPES: dict[str, tuple[str, dict]] = {  # name -> (label, LlamaConfig settings)
    "smollm2-135m": ("SmolLM2-135M shape", {
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": True}),
    "llama-1b": ("Llama-1B shape", {
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 8192, "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": True}),
    "llama-8b": ("Llama-8B shape", {
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 8192}),
    "tiny": ("tiny Llama shape", {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 8192}),
}

def block_way(rows: int, mib: int) -> str:
    return f"capture + summary, blocks {rows} rows / {mib} MiB"


def with_blocks(rows: int, mib: int, work: Callable[[], object]) -> Callable[[], object]:
    """`work` with the blocked attention's blocks at most `rows` query rows and `mib` MiB."""
    from attention_atlas.model.core.attention import source as patterns

    names = ("ROW_BLOCK", "SEEN_ROW_BLOCK", "BLOCK_BYTES",  # the CPU's
             "DEVICE_ROW_BLOCK", "DEVICE_BLOCK_BYTES")  # CUDA's

    def run() -> object:
        saved = [getattr(patterns, name) for name in names]
        for name, size in zip(names, (rows, rows, mib << 20, rows, mib << 20), strict=True):
            setattr(patterns, name, size)
        try:
            return work()
        finally:
            for name, size in zip(names, saved, strict=True):
                setattr(patterns, name, size)

    return run


# -- models ----------------------------------------------------------------------------------------------------


def _tokenizer():
    """A word-level tokenizer with the specials a Llama folder names (the inputs are random ids, never text)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                                eos_token="</s>")


def load(shape: str, device: torch.device, dtype: torch.dtype):
    """An HFRunner of random weights of `shape`, as the app loads a model folder: initialised on `device` in `dtype`,
    saved to a temporary folder, loaded from it by `load_hf_runner` (attention "atlas", the family's taps)."""
    import transformers

    from attention_atlas.model.hf.loading import load_hf_runner

    transformers.utils.logging.disable_progress_bar()
    config = transformers.LlamaConfig(**SHAPES[shape][1], bos_token_id=1, eos_token_id=2)
    with tempfile.TemporaryDirectory(prefix="gpu_capture_") as folder:
        torch.manual_seed(0)
        with torch.device(device):
            model = transformers.LlamaForCausalLM._from_config(config, dtype=dtype)
        model.save_pretrained(folder)
        _tokenizer().save_pretrained(folder)
        del model
        free(device)
        return load_hf_runner(folder, shape, device=device, precision=dtype)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def use_attention(model: torch.nn.Module, implementation: str) -> None:
    """Switch the model's attention implementation (the same weights): "atlas", "sdpa" or "eager"."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    else:  # transformers before set_attn_implementation: every layer reads the shared config's
        model.config._attn_implementation = implementation


# -- one shape and length ---------------------------------------------------------------------------------------


def eager_gb(config, length: int) -> float:
    """Host memory of every layer's float16 pattern (layers x heads x length²)."""
    return config.num_hidden_layers * config.num_attention_heads * length**2 * 2 / 1e9


def ways_of(runner, length: int, device: torch.device, blocks: tuple[tuple[int, int], ...] = ()
            ) -> dict[str, tuple[str, Callable[[], object]]]:
    """{way: (attention implementation, work)} for `length` random tokens, inputs as the app's run makes them: the
    five ways of bench/gpu_capture.py's docstring, then capture + summary with each of `blocks` (rows, MiB)."""
    from attention_atlas.model.core.capture.record import capture
    from attention_atlas.model.core.masks import additive_mask, self_attention_mask
    from attention_atlas.model.hf.heads import ATTENTION

    model = runner.model
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=generator).to(device)
    allowed = self_attention_mask(length, length, True).to(device)
    batch = {"input_ids": ids, "attention_mask": additive_mask(allowed, model.dtype), "logits_to_keep": 1}

    def bare() -> object:
        with torch.inference_mode():
            return model(**batch).logits

    def unmasked() -> object:
        with torch.inference_mode():
            return model(input_ids=ids, logits_to_keep=1).logits

    def captured(summarised: bool) -> Callable[[], object]:
        return lambda: capture(model, runner.taps, ("*.hook_pattern",), lambda: model(**batch), summarised)[1]

    def eager() -> object:
        with torch.inference_mode():
            out = model(**batch, output_attentions=True)
        return [a[0].to(torch.float16).cpu().numpy() for a in out.attentions]  # one copy a layer, as before

    return {"sdpa": ("sdpa", bare), "capture": (ATTENTION, captured(0)),
            "capture + summary": (ATTENTION, captured(True)), "eager": ("eager", eager),
            "sdpa, no mask": ("sdpa", unmasked),
            **{block_way(rows, mib): (ATTENTION, with_blocks(rows, mib, captured(True)))
               for rows, mib in blocks}}


def kernels(config, length: int, device: torch.device, dtype: torch.dtype) -> str:
    """Which fused kernels torch may run one layer's attention with (CUDA): as the "atlas" function calls it (the
    additive mask, `enable_gqa` where the keys have fewer heads), and as transformers' sdpa does (keys repeated to
    every head where there is a mask; none: is_causal). Where none may, torch's math kernel materialises every
    head's (tokens x tokens) scores."""
    cuda = torch.backends.cuda
    if device.type != "cuda" or not hasattr(cuda, "SDPAParams"):
        return ""
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    query = torch.empty(1, heads, length, d_head, device=device, dtype=dtype)
    keys = torch.empty(1, kv, length, d_head, device=device, dtype=dtype)
    mask = torch.zeros(1, 1, length, length, device=device, dtype=dtype)
    tests = {"flash": "can_use_flash_attention", "efficient": "can_use_efficient_attention",
             "cudnn": "can_use_cudnn_attention"}

    def usable(q: torch.Tensor, k: torch.Tensor, m: torch.Tensor | None, causal: bool, gqa: bool) -> str:
        try:
            params = cuda.SDPAParams(q, k, k, m, 0.0, causal, gqa)
        except TypeError:  # torch before enable_gqa
            params = cuda.SDPAParams(q, k, k, m, 0.0, causal)
        names = [name for name, test in tests.items() if hasattr(cuda, test) and getattr(cuda, test)(params, False)]
        return ", ".join(names) if names else "none (math)"

    repeated = keys.repeat_interleave(heads // kv, 1)
    found = (f"atlas (mask{', gqa' if kv != heads else ''}): {usable(query, keys, mask, False, kv != heads)}; "
             f"sdpa (mask): {usable(query, repeated, mask, False, False)}; "
             f"sdpa, no mask: {usable(query, keys, None, True, kv != heads)}")
    del query, keys, mask, repeated
    return f"  fused kernels torch may use: {found}"


def block_sizes(config, length: int, device: torch.device) -> str:
    """The query rows of a capture + summary's blocks at `length` tokens on CUDA, from the memory free now."""
    from attention_atlas.model.core.attention.scratch import Scratch
    from attention_atlas.model.core.attention.source import block_rows

    free = Scratch().free_bytes(device)
    assert free is not None  # a CUDA device's (None elsewhere)
    rows = block_rows(device.type, config.num_attention_heads, length, free)
    return (f"  capture + summary's blocks: {min(rows, length):,} query rows of every head ({-(-length // rows)} a "
            f"layer), from {free / 2**30:,.1f} GiB free")


def count_synchronisations(work: Callable[[], object]) -> Counter[str]:
    """The host synchronisations `work` causes on CUDA, counted by the file and line of Python that caused each (torch's
    sync debug mode: one warning each). The first count in a process runs `work` once before, uncounted: on an H100
    with torch 2.11 the first run under the debug mode waited once more, in torch itself (torch/__init__.py), whatever
    the model."""
    global _debug_mode_used
    if not _debug_mode_used:
        _debug_mode_used = True
        _count(work)
    return _count(work)


_debug_mode_used = False  # whether count_synchronisations has run in this process


def _count(work: Callable[[], object]) -> Counter[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            work()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))


def synchronisations(model: torch.nn.Module, ways: dict[str, tuple[str, Callable[[], object]]]) -> str:
    """One line: each way's host synchronisations in one run, and where the capture's came from."""
    from attention_atlas.model.hf.heads import ATTENTION

    said = []
    try:
        for way, (implementation, work) in ways.items():
            use_attention(model, implementation)
            found = count_synchronisations(work)
            where = ", ".join(f"{line} x{count}" for line, count in found.most_common(8))
            said.append(f"{way} {sum(found.values())}" + (f" (at {where})" if implementation == ATTENTION else ""))
    finally:
        use_attention(model, ATTENTION)
    return f"  host synchronisations in one run: {'; '.join(said)}"


def check(captured: dict, patterns: list) -> float:
    """Largest difference between the capture's last-layer pattern and eager's (head 0, the last 4 query rows)."""
    import numpy as np

    last = [name for name in captured if name.endswith("hook_pattern")][-1]
    ours = captured[last][0].pattern(heads=[0], rows=slice(-4, None), dtype=np.float32)[0]
    return float(np.abs(ours - patterns[-1][0, -4:].astype(np.float32)).max())
