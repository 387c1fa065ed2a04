"""The encoder-decoder transformer of the paper and a GPT-style decoder-only model, from the same parts."""

from __future__ import annotations

import torch
from torch import nn

from attention_atlas.model.core.capture.hooks import HookPoint, name_hook_points
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.layers import HookedLayerNorm, TransformerLayer, embedding_scale, sinusoidal_table


class Stack(nn.Module):
    """Token embedding x sqrt(d_model) + sinusoidal positions, dropout, then N layers
    (and a final LayerNorm when the layers are pre-norm)."""

    def __init__(self, cfg: TransformerConfig, n_layers: int, cross_attention: bool, embedding: nn.Embedding):
        super().__init__()
        self.max_len = cfg.max_len
        self.scale = embedding_scale(cfg.d_model)
        self.embedding = embedding
        self.register_buffer("pos_table", sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(TransformerLayer(cfg, cross_attention) for _ in range(n_layers))
        self.ln_final = HookedLayerNorm(cfg.d_model, cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.hook_embed = HookPoint()  # (batch, len, d_model): token embedding x sqrt(d_model)
        self.hook_pos_embed = HookPoint()  # (1, len, d_model): PE rows 0..len-1
        self.hook_resid_final = HookPoint()  # (batch, len, d_model): the stack's output

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (batch, len) -> (batch, len, d_model), the input of layer 0."""
        length = ids.size(1)
        if length > self.max_len:
            raise UserError(f"sequence of {length} tokens is longer than the model's limit of {self.max_len}")
        tokens = self.hook_embed(self.embedding(ids) * self.scale)
        positions = self.hook_pos_embed(self.pos_table[:length].unsqueeze(0))
        return self.dropout(tokens + positions)

    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ids: (batch, len) -> (batch, len, d_model). Masks as in `TransformerLayer.forward`."""
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, mask, memory, memory_mask)
        if self.ln_final is not None:
            x = self.ln_final(x)
        return self.hook_resid_final(x)


class Generator(nn.Module):
    """The pre-softmax linear projection to the vocabulary, then log-softmax."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, d_model) -> log-probabilities (batch, len, vocab)."""
        return self.proj(x).log_softmax(dim=-1)


class _Base(nn.Module):
    """What both model kinds share: the embedding(s), the generator, initialisation, hook names."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.generator = Generator(cfg.d_model, cfg.vocab_size)

    def _new_embedding(self) -> nn.Embedding:
        return nn.Embedding(self.cfg.vocab_size, self.cfg.d_model, padding_idx=self.cfg.pad_id)

    def _finish(self, embeddings: list[nn.Embedding]) -> None:
        """Xavier-initialise every matrix, zero the padding rows, tie weights, name the hook points."""
        for param in self.parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
        with torch.no_grad():
            for emb in embeddings:
                emb.weight[self.cfg.pad_id].zero_()
        if self.cfg.tie_embeddings:
            self.generator.proj.weight = embeddings[-1].weight
        self.hook_points: dict[str, HookPoint] = name_hook_points(self)

    @property
    def device(self) -> torch.device:
        return self.generator.proj.weight.device


class EncoderDecoder(_Base):
    """The paper's model: encoder stack, decoder stack, generator."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg)
        src_embedding = self._new_embedding()
        tgt_embedding = src_embedding if cfg.tie_embeddings else self._new_embedding()
        self.encoder = Stack(cfg, cfg.n_encoder_layers, cross_attention=False, embedding=src_embedding)
        self.decoder = Stack(cfg, cfg.n_decoder_layers, cross_attention=True, embedding=tgt_embedding)
        self._finish([src_embedding, tgt_embedding] if tgt_embedding is not src_embedding else [src_embedding])

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src: (batch, src_len) -> memory (batch, src_len, d_model). src_mask: (batch, 1, 1|src_len, src_len)."""
        return self.encoder(src, src_mask)

    def decode(
        self,
        memory: torch.Tensor,
        tgt: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tgt: (batch, tgt_len) -> (batch, tgt_len, d_model). tgt_mask: usually padding & causal;
        memory_mask: which source positions the decoder may see, (batch, 1, 1, src_len)."""
        return self.decoder(tgt, tgt_mask, memory, memory_mask)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """-> log-probabilities of the next target token, (batch, tgt_len, vocab)."""
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(memory, tgt, tgt_mask, memory_mask))


class DecoderOnly(_Base):
    """A GPT-style language model: one stack of self-attention + FFN layers under a causal mask."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg)
        embedding = self._new_embedding()
        self.decoder = Stack(cfg, cfg.n_decoder_layers, cross_attention=False, embedding=embedding)
        self._finish([embedding])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids: (batch, len); mask: usually padding & causal. -> log-probabilities (batch, len, vocab)."""
        return self.generator(self.decoder(ids, mask))


def build_model(cfg: TransformerConfig) -> EncoderDecoder | DecoderOnly:
    """A freshly initialised model of the configured kind."""
    return EncoderDecoder(cfg) if cfg.kind == "encoder-decoder" else DecoderOnly(cfg)
