"""What a Trace records beside its hooks: the model's facts, the outputs, the decoding steps (trace.py holds them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import numpy as np

OutputKind = Literal["generated", "next token", "teacher-forced", "embeddings"]
# generated: output_text is the model's own greedy output, computed under the masks of this trace;
# next token: only the most likely next token (a causal LM's prompt too long to continue);
# teacher-forced: output_text is the target a person gave, scored token by token in the forced_* outputs;
# embeddings: an encoder, whose output is one vector per token (no text).


class Outputs(TypedDict, total=False):
    """What a run produced besides its hooks; which keys a trace has follows from its model and output_kind."""

    log_probs: np.ndarray  # toy models: (len, vocab), every position's next-token log-probabilities
    predicted_ids: np.ndarray  # toy models and encoder-decoders: (len,) the most likely token at each position
    predicted_tokens: np.ndarray  # Hugging Face encoder-decoders: (len,) str, those tokens
    top_next_ids: np.ndarray  # Hugging Face causal LMs: (10,) the likeliest next tokens after the sequence
    top_next_probs: np.ndarray  # (10,) their probabilities
    top_next_tokens: np.ndarray  # (10,) str, how they read
    token_similarity: np.ndarray  # Hugging Face encoders: (len, len) cosine similarity of the last layer's vectors
    forced_tokens: np.ndarray  # a given target (teacher-forced, model/core/generation/forcing.py): (n,) str, its tokens
    forced_probs: np.ndarray  # (n,) the probability the model gave each
    forced_ranks: np.ndarray  # (n,) its rank among all tokens (1 = the model's own choice)
    forced_choice_tokens: np.ndarray  # (n,) str, what the model would have chosen
    forced_choice_probs: np.ndarray  # (n,) with that probability


@dataclass(frozen=True)
class ModelFacts:
    """What a person should know about the model that produced a trace."""

    model_id: str
    family: str  # e.g. "from-scratch transformer (Vaswani et al. 2017)"
    kind: str  # "encoder", "decoder" or "encoder-decoder"
    n_encoder_layers: int
    n_decoder_layers: int
    n_heads: int
    n_kv_heads: int  # = n_heads unless key/value heads are shared (GQA)
    d_model: int
    d_ff: int
    vocab_size: int
    max_len: int  # longest sequence in tokens
    positional: str  # "sinusoidal", "learned", "rotary", ...
    norm: str  # "post-norm" or "pre-norm"
    n_params: int
    device: str
    notes: dict[str, Any] = field(default_factory=dict)  # e.g. the toy task and its accuracy
    special_ids: list[int] = field(default_factory=list)  # ids of <s>, </s>, [CLS], [SEP], padding, ...
    precision: str = "float32"  # the weights' and activations' dtype ("bfloat16", "float16")
    windows: list[int] = field(default_factory=list)  # per layer of its self-attention, a sliding window w: a query
    # sees the keys less than w positions away (before it, with a causal mask), 0 for all; empty: no layer slides
    chunks: list[int] = field(default_factory=list)  # per layer of its self-attention, a chunk c (Llama 4): a query
    # sees only the keys of its own chunk of c positions (0..c-1, c..2c-1, ...); 0 for all; empty: no layer is chunked
    attention_blocks: list[int] = field(default_factory=list)  # per decoder layer, its true layer number where only
    # some of the model's layers are softmax attention (a hybrid; notes["layer map"] names the others); empty: i is i
    block_kinds: list[str] = field(default_factory=list)  # a hybrid's: per block (every one, attention or not), what
    # mixes its tokens ("softmax attention", "Mamba (state space)", ...); its stream: `decoder.blocks.{b}.` hooks

    def layer_words(self, layer: int) -> str:
        """How a page names decoder attention layer `layer`: "layer 3 (attention layer 0)" in a hybrid, where the
        app's layers are its softmax attention layers only, numbered 0 .. n - 1; "layer 3" otherwise."""
        if not self.attention_blocks:
            return f"layer {layer}"
        return f"layer {self.attention_blocks[layer]} (attention layer {layer})"

    def layer_choice(self, layer: int) -> str:
        """A layer picker's option: the layer's number, or a hybrid's `layer_words` (its true number)."""
        return self.layer_words(layer) if self.attention_blocks else str(layer)


@dataclass
class DecodeStep:
    """One greedy step: the token chosen and the new query row of each attention site."""

    token_id: int
    attention: dict[str, np.ndarray]  # hook name -> (heads, k_len)
