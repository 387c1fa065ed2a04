"""A character-level tokenizer for the toy models, with <pad>, <s> and </s>."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from attention_atlas.model.core.text_checks import validate_text

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIALS = (PAD, BOS, EOS)  # ids 0, 1, 2


class CharTokenizer:
    """One token per character; ids 0-2 are <pad>, <s>, </s>, then the characters in sorted order."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars = sorted(set(chars))
        self.vocab: list[str] = [*SPECIALS, *self.chars]
        self._ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id = (self._ids[t] for t in SPECIALS)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(
        self, text: str, max_chars: int, allowed: Collection[str] | None = None, what: str = "text"
    ) -> list[int]:
        """Text -> ids (no specials added). ValueError if the text is empty, too long or has characters
        outside `allowed` (default: the whole vocabulary)."""
        validate_text(text, max_chars, allowed=self.chars if allowed is None else allowed, what=what)
        return [self._ids[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text, stopping at </s> and dropping the other special tokens."""
        out: list[str] = []
        for i in ids:
            if i == self.eos_id:
                break
            if i >= len(SPECIALS):
                out.append(self.vocab[i])
        return "".join(out)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """Ids -> token strings, specials included."""
        return [self.vocab[i] for i in ids]
