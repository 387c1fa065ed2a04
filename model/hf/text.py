"""A Hugging Face tokenizer as the runs read it: text to ids within the model's limit, ids to tokens a person can
read, and the ids that end or pad a sequence."""

from __future__ import annotations

from typing import Any

from torch import nn

from attention_atlas.model.core.errors import UserError

READABLE_MARKERS = ("Ġ", "▁", "Ċ", "ĉ")  # byte-level BPE and SentencePiece spell spaces with these


class TokenText:
    """Text and token ids for one model: `tokenizer` (a transformers tokenizer), at most `max_tokens` a sequence."""

    def __init__(self, tokenizer: Any, model_id: str, max_tokens: int) -> None:
        self.tokenizer, self.model_id, self.max_tokens = tokenizer, model_id, max_tokens

    def encode(self, text: str, what: str = "text") -> list[int]:
        """The ids of `text` with the model's special tokens; ValueError past max_tokens (`what` names the text)."""
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(ids) > self.max_tokens:
            raise UserError(f"The {what} is {len(ids):,} tokens long; {self.model_id} accepts at most "
                             f"{self.max_tokens:,} here. Shorten it.")
        return ids

    def encode_continuation(self, target: str, prompt_len: int) -> list[int]:
        """A causal LM's target: its tokens as they continue a prompt of `prompt_len` (no special tokens added)."""
        ids = self.tokenizer(target, add_special_tokens=False)["input_ids"]
        if not ids:
            raise UserError("The target has no tokens: type at least one word.")
        if prompt_len + len(ids) > self.max_tokens:
            raise UserError(f"The text and the target are {prompt_len + len(ids):,} tokens together; "
                             f"{self.model_id} accepts at most {self.max_tokens:,} here. Shorten them.")
        return ids

    def tokens(self, ids: list[int]) -> list[str]:
        """Token strings a person can read: byte-level and SentencePiece markers turned back into spaces; an id the
        tokenizer has no token for (a model's embedding padded past its tokenizer) as `unknown_id`."""
        special = set(self.tokenizer.all_special_ids)
        out = []
        for i, raw in zip(ids, self.tokenizer.convert_ids_to_tokens(ids), strict=True):
            readable = unknown_id(i) if raw is None else raw
            if raw is not None and i not in special and any(m in raw for m in READABLE_MARKERS):
                readable = self.tokenizer.convert_tokens_to_string([raw]) or raw
            out.append(readable)
        return out

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; an id the tokenizer has no token for is written `unknown_id` (the tokenizer would drop it
        without a word)."""
        known = [i < len(self.tokenizer) for i in ids]
        if all(known):
            return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        parts, start = [], 0
        for end in [*(n for n in range(1, len(ids)) if known[n] != known[n - 1]), len(ids)]:
            run = ids[start:end]
            parts.append(self.tokenizer.decode(run, skip_special_tokens=skip_special_tokens) if known[start]
                         else "".join(map(unknown_id, run)))
            start = end
        return "".join(parts)

    def pad_id(self) -> int:
        """The padding token's id (the end token's where the tokenizer has none)."""
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id or 0


def unknown_id(i: int) -> str:
    """How an id the tokenizer has no token for reads: a model's embedding may be larger than its tokenizer (padded
    vocabularies: Pythia, Qwen, many fine-tunes), and the model may still choose such an id."""
    return f"[id {i}]"


def eos_ids(model: nn.Module) -> set[int]:
    """The ids that end a sequence the model writes (its generation config's, else its config's)."""
    eos = model.generation_config.eos_token_id
    eos = model.config.eos_token_id if eos is None else eos
    ids = set(eos) if isinstance(eos, list) else {eos} if eos is not None else set()
    return ids  # pyright: ignore[reportReturnType] configs' ints, read through torch's __getattr__
