"""Running a Hugging Face model on a person's text under capture, into the same Trace as the toy models.

Masks are built here as one (q_len, k_len) bool matrix per self-attention site (True = may attend)
and handed to the model as a 4D additive mask, so that a causal mask can be switched on for an
encoder or off for a decoder without touching the shared model. Attention probabilities are stored
as float16 (half the memory; drawn as float32), and long causal ones as lower triangles.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from model.capture import HookSite, capture
from model.devices import free_accelerator_memory, is_out_of_memory
from model.hf_sites import Family
from model.inputs import validate_text
from model.masks import blocked_mask, causal_mask, check_every_query_sees_a_key, combine
from model.runner import RunOptions
from model.tracing import PATTERN_SUFFIX, ModelFacts, Trace

MAX_TEXT_CHARS = 50_000  # before tokenising; the token limit below is the real one
MAX_TOKENS = 2048  # longest input traced, whatever the model allows (memory grows with its square)
PACK_FROM_TOKENS = 1024  # causal attention at least this long is stored as lower triangles (half the memory)
CONTINUATION_TOKENS = 8  # a causal LM's greedy continuation shown as its output
CONTINUATION_MAX_PROMPT = 512  # longer prompts show the next-token choice only (generating re-reads the prompt)
MAX_GENERATED = 64  # longest output an encoder-decoder model writes
TOP_K = 10
READABLE_MARKERS = ("Ġ", "▁", "Ċ", "ĉ")  # byte-level BPE and SentencePiece spell spaces with these


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool (batch, 1, q, k), True = may attend -> 0 where allowed, the dtype's minimum elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def self_attention_mask(length: int, real: int, causal: bool, blocked: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """(1, 1, length, length) bool: padding keys (positions >= real) hidden, causal if asked, blocked pairs hidden."""
    keys = (torch.arange(length) < real)[None, None, None, :]
    causal_part = causal_mask(length) if causal else None
    mask = combine(keys, causal_part, blocked_mask(length, blocked) if blocked else None)
    mask = mask.expand(1, 1, length, length)
    check_every_query_sees_a_key(mask)
    return mask


def _stored_pattern(site: HookSite, lower_triangle: bool) -> HookSite:
    """Attention as a Trace keeps it, converted as soon as the hook sees it: float16, and for a
    causal site only the lower triangle (tracing.pack_lower_triangle's layout)."""

    def read(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> torch.Tensor:
        weights = site.read(args, kwargs, out).to(torch.float16)  # (batch, heads, q_len, k_len)
        if lower_triangle:
            flat = _tril_flat_indices(weights.size(-1), weights.device)
            weights = weights.flatten(-2)[..., flat]  # (batch, heads, q_len * (q_len + 1) / 2)
        return weights

    return HookSite(site.module, read)


@functools.lru_cache(maxsize=8)
def _tril_flat_indices(n: int, device: torch.device) -> torch.Tensor:
    """Positions of the lower triangle in a flattened n x n matrix, row by row (cached: every layer asks)."""
    rows, cols = torch.tril_indices(n, n, device=device)
    return rows * n + cols


def _is_self_attention_pattern(name: str) -> bool:
    return name.endswith(".attn." + PATTERN_SUFFIX)


class HFRunner:
    """A loaded Hugging Face model (eager attention) with the hook sites of its family."""

    def __init__(
        self,
        model_id: str,
        model: nn.Module,
        tokenizer: Any,
        family: Family,
        notes: dict[str, Any],
        cpu_loader: Callable[[], nn.Module] | None = None,
    ) -> None:
        """cpu_loader loads the same model on the CPU, for runs a GPU cannot hold."""
        self.model, self.tokenizer, self.family = model, tokenizer, family
        self._cpu_loader = cpu_loader
        self.sites = family.sites(model)  # hook name -> module and reader
        self.examples = EXAMPLES[family.kind]
        self.facts = replace(_facts(model_id, model, family, notes), special_ids=sorted(set(tokenizer.all_special_ids)))
        self._cpu_copy: nn.Module | None = None
        self._cpu_copy_lock = threading.Lock()

    @property
    def max_tokens(self) -> int:
        return self.facts.max_len

    # -- entry point ---------------------------------------------------------------------------
    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        validate_text(text, MAX_TEXT_CHARS)
        if target is not None:
            validate_text(target, MAX_TEXT_CHARS, what="target")
        try:
            return self._run(self.model, text, target, options)
        except (torch.OutOfMemoryError, RuntimeError) as error:
            if self.facts.device == "cpu" or self._cpu_loader is None or not is_out_of_memory(error):
                raise
        free_accelerator_memory()
        trace = self._run(self._cpu_model(), text, target, options)
        message = f"The {self.facts.device.split(':')[0].upper()} ran out of memory; this run used the CPU instead."
        trace.facts = replace(trace.facts, device="cpu", notes={**trace.facts.notes, "fallback": message})
        return trace

    def _cpu_model(self) -> nn.Module:
        """A CPU copy of the model, made once, for runs the GPU cannot hold."""
        with self._cpu_copy_lock:
            if self._cpu_copy is None:
                assert self._cpu_loader is not None
                self._cpu_copy = self._cpu_loader()
            return self._cpu_copy

    def _run(self, model: nn.Module, text: str, target: str | None, options: RunOptions) -> Trace:
        if self.family.kind == "encoder-decoder":
            return self._run_encoder_decoder(model, text, target, options)
        return self._run_single_stack(model, text, options)

    # -- tokens --------------------------------------------------------------------------------
    def _encode(self, text: str, what: str = "text") -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(ids) > self.max_tokens:
            raise ValueError(
                f"The {what} is {len(ids):,} tokens long; {self.facts.model_id} accepts at most "
                f"{self.max_tokens:,} here. Shorten it."
            )
        return ids

    def _tokens(self, ids: list[int]) -> list[str]:
        """Token strings a person can read: byte-level and SentencePiece markers turned back into spaces."""
        special = set(self.tokenizer.all_special_ids)
        out = []
        for i, raw in zip(ids, self.tokenizer.convert_ids_to_tokens(ids), strict=True):
            readable = raw
            if i not in special and any(m in raw for m in READABLE_MARKERS):
                readable = self.tokenizer.convert_tokens_to_string([raw]) or raw
            out.append(readable)
        return out

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id or 0

    # -- encoder-only and decoder-only ---------------------------------------------------------
    def _run_single_stack(self, model: nn.Module, text: str, options: RunOptions) -> Trace:
        ids = self._encode(text)
        padded = options.padded(ids, self._pad_id(), self.max_tokens)
        is_decoder = self.family.kind == "decoder"
        causal = options.causal == "on" or (is_decoder and options.causal != "off")
        allowed = self_attention_mask(len(padded), len(ids), causal, options.blocked)
        device = model.device
        input_ids = torch.tensor([padded], device=device)
        attention_mask = additive_mask(allowed.to(device), model.dtype)
        stack = "decoder" if is_decoder else "encoder"
        causal_stacks = {stack} if causal and len(padded) >= PACK_FROM_TOKENS else set()
        # a causal LM computes the logits of the last real token only: (len, vocab) of them would be 400 MB at 2k
        run_kwargs = {"logits_to_keep": torch.tensor([len(ids) - 1], device=device)} if is_decoder else {}
        out, captured = capture(
            model, self.sites_for_run(model, causal_stacks), options.hooks,
            lambda: model(input_ids=input_ids, attention_mask=attention_mask, **run_kwargs),
        )
        if is_decoder:
            outputs, output_text = self._next_tokens(model, out.logits[0, -1], ids)
        else:
            outputs, output_text = {"token_similarity": _cosine_similarity(out.last_hidden_state[0])}, ""
        masks = {f"{stack}.attn": allowed[0, 0]}
        return self._trace(padded, [], masks, captured, outputs, output_text, options, causal_stacks)

    def _next_tokens(self, model: nn.Module, logits: torch.Tensor, ids: list[int]) -> tuple[dict, str]:
        """Top next tokens from the traced pass, and the model's own greedy continuation (for prompts up to
        CONTINUATION_MAX_PROMPT tokens; beyond, the single most likely next token)."""
        probs = logits.float().softmax(-1)
        top = probs.topk(TOP_K)
        top_ids = top.indices.tolist()
        outputs = {
            "top_next_ids": np.array(top_ids),
            "top_next_probs": top.values.cpu().numpy(),
            "top_next_tokens": np.array(self._tokens(top_ids), dtype=str),
        }
        if len(ids) > CONTINUATION_MAX_PROMPT:
            return outputs, self.tokenizer.decode(top_ids[:1])
        with torch.inference_mode():
            generated = model.generate(
                torch.tensor([ids], device=model.device), attention_mask=torch.ones(1, len(ids), device=model.device),
                max_new_tokens=CONTINUATION_TOKENS, do_sample=False, pad_token_id=self._pad_id(),
            )
        return outputs, self.tokenizer.decode(generated[0, len(ids):], skip_special_tokens=True)

    # -- encoder-decoder -----------------------------------------------------------------------
    def _run_encoder_decoder(self, model: nn.Module, text: str, target: str | None, options: RunOptions) -> Trace:
        device = model.device
        ids = self._encode(text)
        padded = options.padded(ids, self._pad_id(), self.max_tokens)
        src = torch.tensor([padded], device=device)
        real_keys = (torch.arange(len(padded), device=device) < len(ids)).long()[None]  # (1, src_len)
        start = model.config.decoder_start_token_id
        if target is None:
            with torch.inference_mode():
                generated = model.generate(
                    src[:, : len(ids)], max_new_tokens=min(MAX_GENERATED, self.max_tokens), do_sample=False, num_beams=1
                )[0].tolist()
            labels = generated[1:]
        else:
            labels = self._encode(target, what="target")
        tgt_ids = [start, *labels[:-1]]
        tgt = torch.tensor([tgt_ids], device=device)
        enc_allowed = self_attention_mask(len(padded), len(ids), options.causal == "on", options.blocked)
        dec_allowed = self_attention_mask(len(tgt_ids), len(tgt_ids), options.causal != "off", ())

        def forward() -> Any:
            enc_mask = additive_mask(enc_allowed.to(device), model.dtype)
            encoder_out = model.get_encoder()(input_ids=src, attention_mask=enc_mask)
            return model(
                encoder_outputs=encoder_out, attention_mask=real_keys, decoder_input_ids=tgt,
                decoder_attention_mask=additive_mask(dec_allowed.to(device), model.dtype),
            )

        causal_stacks = {"encoder"} if options.causal == "on" and len(padded) >= PACK_FROM_TOKENS else set()
        causal_stacks |= {"decoder"} if options.causal != "off" and len(tgt_ids) >= PACK_FROM_TOKENS else set()
        out, captured = capture(model, self.sites_for_run(model, causal_stacks), options.hooks, forward)
        predicted = out.logits[0].argmax(-1).tolist()
        masks = {
            "encoder.attn": enc_allowed[0, 0],
            "decoder.attn": dec_allowed[0, 0],
            "decoder.cross_attn": real_keys.bool().cpu().expand(len(tgt_ids), -1),
        }
        outputs = {
            "predicted_ids": np.array(predicted),
            "predicted_tokens": np.array(self._tokens(predicted), dtype=str),
        }
        output_text = self.tokenizer.decode(labels if target is None else predicted, skip_special_tokens=True)
        return self._trace(padded, tgt_ids, masks, captured, outputs, output_text, options, causal_stacks)

    # -- shared --------------------------------------------------------------------------------
    def sites_for_run(self, model: nn.Module, causal_stacks: set[str]) -> dict[str, HookSite]:
        """The sites of `model` (this runner's, or its CPU copy's) with attention stored compactly:
        self-attention in `causal_stacks` is packed as lower triangles."""
        sites = self.sites if model is self.model else self.family.sites(model)
        return {
            name: _stored_pattern(site, _is_self_attention_pattern(name) and name.split(".")[0] in causal_stacks)
            if name.endswith(PATTERN_SUFFIX) else site
            for name, site in sites.items()
        }

    def _trace(
        self,
        ids: list[int],
        target_ids: list[int],
        masks: dict[str, torch.Tensor],
        captured: dict[str, np.ndarray],
        outputs: dict[str, np.ndarray],
        output_text: str,
        options: RunOptions,
        causal_stacks: set[str],
    ) -> Trace:
        packed = {n for n in captured if _is_self_attention_pattern(n) and n.split(".")[0] in causal_stacks}
        return Trace(
            facts=self.facts,
            tokens=self._tokens(ids),
            ids=ids,
            target_tokens=self._tokens(target_ids),
            target_ids=target_ids,
            masks={k: v.cpu().numpy() for k, v in masks.items()},
            captured={k: v[0] for k, v in captured.items()},
            outputs=outputs,
            output_text=output_text,
            options=options.record(),
            lower_triangle=packed,
        )



EXAMPLES = {
    "encoder": ("The cat sat on the mat because it was tired.", "The quick brown fox", "Paris is in France."),
    "decoder": ("The capital of France is", "Once upon a time, there was a", "def fibonacci(n):"),
    "encoder-decoder": ("The house is wonderful.", "translate English to German: Thank you.", "Hello world"),
}


def _config_value(config: Any, *names: str, default: int = 0) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def _facts(model_id: str, model: nn.Module, family: Family, notes: dict[str, Any]) -> ModelFacts:
    c = model.config
    n_heads = _config_value(c, "num_attention_heads", "n_head", "encoder_attention_heads", "num_heads")
    n_kv = _config_value(c, "num_key_value_heads", default=n_heads)
    d_model = _config_value(c, "hidden_size", "n_embd", "d_model")
    limit = _config_value(c, "max_position_embeddings", "n_positions", default=MAX_TOKENS)
    layers = {stack: count(c) for stack, count in family.layer_counts.items()}
    if n_kv != n_heads:
        notes = {**notes, "grouped-query attention": f"query head h reads key/value head h // {n_heads // n_kv}"}
    return ModelFacts(
        model_id=model_id,
        family=f"{family.name} ({c.model_type}, Hugging Face)",
        kind=family.kind,
        n_encoder_layers=layers.get("encoder", 0),
        n_decoder_layers=layers.get("decoder", 0),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_model=d_model,
        d_ff=_config_value(c, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim", default=4 * d_model),
        vocab_size=c.vocab_size,
        max_len=min(limit, MAX_TOKENS),
        positional=family.positional,
        norm=family.norm,
        n_params=sum(p.numel() for p in model.parameters()),
        device=str(model.device),
        notes=notes,
    )


def _cosine_similarity(hidden: torch.Tensor) -> np.ndarray:
    """(len, d) token vectors -> (len, len) cosine similarities."""
    unit = torch.nn.functional.normalize(hidden.float(), dim=-1)
    return (unit @ unit.T).cpu().numpy()

