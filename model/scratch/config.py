"""Configuration of the from-scratch transformer ("Attention Is All You Need", Vaswani et al. 2017)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from attention_atlas.model.core.errors import UserError

ModelKind = Literal["encoder-decoder", "decoder"]
NormPlacement = Literal["post", "pre"]


@dataclass(frozen=True)
class TransformerConfig:
    """Every size and switch of the model; `base()` and `big()` are the paper's two models."""

    vocab_size: int  # tokens in the (shared) source/target vocabulary
    kind: ModelKind = "encoder-decoder"  # "decoder" builds a GPT-style decoder-only model
    d_model: int = 512  # width of the residual stream and of every embedding
    n_heads: int = 8  # attention heads per layer; d_k = d_v = d_model / n_heads
    d_ff: int = 2048  # hidden width of the position-wise feed-forward network
    n_encoder_layers: int = 6  # N in the paper (ignored for decoder-only models)
    n_decoder_layers: int = 6  # N in the paper
    dropout: float = 0.1  # P_drop: on each sub-layer output and on embeddings + positions (paper §5.4)
    max_len: int = 512  # rows of the sinusoidal table = longest sequence the model accepts
    norm: NormPlacement = "post"  # "post": LayerNorm(x + sublayer(x)) as in the paper; "pre": x + sublayer(LN(x))
    tie_embeddings: bool = True  # share source/target embeddings and the pre-softmax projection (paper §3.4)
    layer_norm_eps: float = 1e-5  # epsilon inside every LayerNorm
    pad_id: int = 0  # token id of padding; its embedding row is kept at zero

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_decoder_layers", "max_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UserError(f"{name} must be a whole number of at least 1, not {getattr(self, name)!r}")
        if not isinstance(self.n_encoder_layers, int) or self.n_encoder_layers < 0:
            raise UserError(f"n_encoder_layers must be a whole number, not {self.n_encoder_layers!r}")
        if self.d_model % self.n_heads:
            raise UserError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.kind not in ("encoder-decoder", "decoder"):
            raise UserError(f"kind must be 'encoder-decoder' or 'decoder', not {self.kind!r}")
        if self.norm not in ("post", "pre"):
            raise UserError(f"norm must be 'post' or 'pre', not {self.norm!r}")

    @property
    def d_head(self) -> int:
        """d_k = d_v = d_model / h."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def base(cls, vocab_size: int = 37000) -> TransformerConfig:
        """The paper's base model (65M parameters with its 37k shared BPE vocabulary)."""
        return cls(vocab_size=vocab_size)

    @classmethod
    def big(cls, vocab_size: int = 37000) -> TransformerConfig:
        """The paper's big model (213M parameters)."""
        return cls(vocab_size=vocab_size, d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)

    @classmethod
    def toy(cls, vocab_size: int, kind: ModelKind = "encoder-decoder") -> TransformerConfig:
        """A small model that trains on a laptop CPU in minutes (the shipped toy models).
        Encoder-decoder: 2 + 2 layers; decoder-only: 4 layers, about the same size."""
        decoder_only = kind == "decoder"
        return cls(
            vocab_size=vocab_size,
            kind=kind,
            d_model=64,
            n_heads=4,
            d_ff=256,
            n_encoder_layers=0 if decoder_only else 2,
            n_decoder_layers=4 if decoder_only else 2,
            dropout=0.1,
            max_len=64,
        )
