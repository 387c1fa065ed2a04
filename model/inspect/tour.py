"""The tour: the forward pass of the model in use as a sequence of steps, in the order of "Attention Is All You Need"
§3 (tokens, embedding, positions, one block in detail, the other blocks, the output), each naming the captured value
it shows (a hook of the run), its dimensions' names and a few sentences said from the model's facts. A step the model
lacks (no position vector, no cross-attention, no final norm, no next token) is not in the list. Pure: the Tour page
(app_pages/tour.py) draws each step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.trace import Trace

Kind = Literal["tokens", "matrix", "head", "mask", "pattern", "layers", "next token", "text"]
MODEL = ("tokens", "d_model")  # a (tokens, d_model) value: the residual stream and what adds to it
LABELS = {"tokens": "tokens", "embedding": "embedding", "positions": "+ positions", "input": "stream x",
          "norm1": "norm", "queries": "Q, K, V", "rotation": "rotate Q, K", "scores": "scores", "mask": "+ mask",
          "softmax": "softmax", "values": "A V", "heads_out": "concat · W_O", "sum1": "x + attention",
          "cross": "cross-attention", "sumcross": "x + cross", "norm2": "norm", "ffn": "FFN", "ffn_out": "FFN out",
          "sum2": "x + FFN", "blocks": "the other blocks", "final_norm": "final norm", "next token": "next token",
          "output": "output"}  # a step key's last part -> its name in the diagram
DIMS = {"hook_q": ("heads", "tokens", "d_head"), "hook_rot_q": ("heads", "tokens", "d_head"),
        "hook_k": ("kv_heads", "tokens", "d_head"), "hook_v": ("kv_heads", "tokens", "d_head"),
        "hook_z": ("heads", "tokens", "d_head"), "hook_attn_scores": ("heads", "queries", "keys"),
        "hook_pre": ("tokens", "d_ff"), "hook_post": ("tokens", "d_ff")}  # hook name's last part -> dimensions


@dataclass(frozen=True)
class Step:
    """One screen of the tour: what it shows (`kind`), the hook whose value it draws, and its words."""

    key: str  # unique in a tour: "encoder.scores"
    title: str
    text: str
    kind: Kind
    hook: str | None = None  # the captured value drawn (None: the step draws what `kind` says)
    site: str | None = None  # the attention site of a head's step ("decoder.cross_attn")

    @property
    def label(self) -> str:
        """The step's short name (the diagram's): a post-norm sum says its norm."""
        base = LABELS[self.key.rsplit(".", 1)[-1]]
        return f"norm({base})" if self.key.rsplit(".", 1)[-1].startswith("sum") and ".ln" in (self.hook or "") \
            else base

    @property
    def stack(self) -> str:
        """"encoder" or "decoder" (the next token and an encoder's output: the last stack's)."""
        return self.key.split(".")[0] if "." in self.key else ""

    @property
    def dims(self) -> tuple[str, ...]:
        """The names of the drawn value's dimensions, in order."""
        if self.hook is None:
            return ()
        return DIMS.get(self.hook.rsplit(".", 1)[-1], MODEL)


def step_shape(trace: Trace, step: Step) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The names and sizes of what `step` shows in `trace`: a captured value's, or what its kind draws."""
    facts = trace.facts
    if step.hook is not None:
        return step.dims, trace.captured[step.hook].shape
    if step.kind == "tokens":
        reads_target = step.stack == "decoder" and facts.kind == "encoder-decoder"
        return ("tokens",), (len(trace.target_tokens if reads_target else trace.tokens),)
    if step.kind == "pattern":
        return ("queries", "keys"), (len(trace.query_tokens(step.site)), len(trace.key_tokens(step.site)))
    if step.kind == "layers":  # the stream after each block, as attention_atlas.plot.tour draws it
        return ("layers", "tokens", "d_model"), (len(_block_outputs(facts, step.stack)),
                                                 len(trace.query_tokens(f"{step.stack}.attn")), facts.d_model)
    if step.kind == "next token":
        return ("vocabulary",), (facts.vocab_size,)
    return (), ()


def shape_label(dims: tuple[str, ...], shape: tuple[int, ...]) -> str:
    """("tokens", "d_model") and (12, 512) -> "(tokens = 12, d_model = 512)"."""
    return "(" + ", ".join(f"{name} = {size:,}" for name, size in zip(dims, shape, strict=True)) + ")"


def tour_options(facts: ModelFacts) -> RunOptions:
    """What a tour's run records: each stack's input and output, its first block whole, every block's output."""
    return RunOptions(hooks=tuple(pattern for stack in _stacks(facts) for pattern in (
        f"{stack}.hook_*", f"{stack}.ln_final.hook_normalized", f"{stack}.0.*", f"{stack}.*.hook_resid_post",
        f"{stack}.*.hook_normalized_resid_post")))


def tour_steps(trace: Trace) -> list[Step]:
    """Every step of `trace`'s forward pass that its model has, in order: an encoder-decoder's encoder, then its
    decoder; a stack's first block in detail, the others together; the next token where the model predicts one."""
    facts = trace.facts
    steps = [step for stack in _stacks(facts) for step in _stack_steps(trace, stack)]
    if facts.kind == "encoder":
        steps.append(Step("output", "The output: a vector per token", (
            f"An encoder's output is the last block's vectors, one of {facts.d_model} numbers per token: a classifier "
            "or a search index reads them. It predicts no next token, so the tour ends here."), "text"))
    else:
        steps.append(Step("next token", "Unembedding, softmax, the next token", (
            f"The last token's vector times the unembedding matrix gives a score for each of the {facts.vocab_size:,} "
            "tokens of the vocabulary; a softmax turns the scores into probabilities. Greedy decoding writes the "
            "likeliest and runs again with it appended."), "next token"))
    return steps


def _stacks(facts: ModelFacts) -> list[str]:
    """The model's stacks in the order they run."""
    return [stack for stack, layers in (("encoder", facts.n_encoder_layers), ("decoder", facts.n_decoder_layers))
            if layers]


def _capitalised(title: str) -> str:
    return title[:1].upper() + title[1:]


def _stack_steps(trace: Trace, stack: str) -> list[Step]:
    facts, held = trace.facts, set(trace.captured)
    decoder_of_pair = stack == "decoder" and facts.kind == "encoder-decoder"
    first, norm_first = f"{stack}.0", facts.norm.startswith("pre")
    tokens = trace.target_tokens if decoder_of_pair else trace.tokens
    named = f"The {stack}: {{}}" if facts.kind == "encoder-decoder" else "{}"  # its first steps name the stack
    steps = [Step(f"{stack}.tokens", _capitalised(named.format("tokens")), _tokens_text(facts, stack, len(tokens)),
                  "tokens"),
             Step(f"{stack}.embedding", _capitalised(named.format("token embeddings")), _embedding_text(facts),
                  "matrix", f"{stack}.hook_embed")]
    positions = Step(f"{stack}.positions", "Positions", _positions_text(facts), "text")
    if f"{stack}.hook_pos_embed" in held:
        positions = Step(f"{stack}.positions", "Positions", _positions_text(facts), "matrix", f"{stack}.hook_pos_embed")
    steps += [positions, Step(f"{stack}.input", "The residual stream", (
        f"What the first block reads: one vector of d_model = {facts.d_model} numbers per token. It is the residual "
        "stream: every sub-layer reads it and adds what it computes to it."), "matrix", f"{first}.hook_resid_pre")]
    attention = f"{first}.attn"
    if norm_first and f"{first}.ln1.hook_normalized" in held:
        steps.append(Step(f"{stack}.norm1", f"{_norm_name(facts)} first", (
            f"A pre-norm model ({facts.norm}) normalises each token's vector before attention reads it; the stream "
            "itself is left as it is."), "matrix", f"{first}.ln1.hook_normalized"))
    steps += _attention_steps(trace, stack, attention, f"{stack}.attn", held)
    steps += _sum_steps(facts, stack, "1", f"{first}.hook_resid_mid", f"{first}.ln1.hook_normalized", held,
                        "attention")
    if decoder_of_pair:
        steps.append(Step(f"{stack}.cross", "Cross-attention over the encoder's output", (
            "The decoder's second attention: its queries come from the output so far, its keys and values from the "
            "encoder's last vectors. Each output token looks over the source text."), "pattern", None,
            f"{stack}.cross_attn"))
        steps += _sum_steps(facts, stack, "cross", f"{first}.hook_resid_mid_cross", f"{first}.ln_cross.hook_normalized",
                            held, "cross-attention")
    if norm_first and f"{first}.ln2.hook_normalized" in held:
        steps.append(Step(f"{stack}.norm2", f"{_norm_name(facts)} before the feed-forward network", (
            "Normalised again, before the feed-forward network reads it."), "matrix", f"{first}.ln2.hook_normalized"))
    steps += [Step(f"{stack}.ffn", "The feed-forward network", (
        f"Each token alone, the same for every position: d_model = {facts.d_model} → d_ff = {facts.d_ff}, an "
        "activation (here, its output), then back to d_model."), "matrix", f"{first}.mlp.hook_post"),
        Step(f"{stack}.ffn_out", "The feed-forward output", (
            f"Back to d_model = {facts.d_model}: what the feed-forward network adds to each token's vector."), "matrix",
            f"{first}.hook_mlp_out")]
    steps += _sum_steps(facts, stack, "2", f"{first}.hook_resid_post", f"{first}.ln2.hook_normalized", held,
                        "feed-forward network")
    outputs = _block_outputs(facts, stack)  # the stream after each block (a hybrid's: every block, attention or not)
    layers = len(outputs)
    if layers > 1 and all(hook in held or hook.replace("resid_post", "normalized_resid_post") in held
                          for hook in outputs):  # the stream it draws is recorded
        mixed = stack == "decoder" and len(set(facts.block_kinds)) > 1
        alike = (f"Its {layers} blocks are not all alike ({facts.notes.get('layer map')}), but each reads the "
                 "stream and adds to it. " if mixed else f"Each of the {layers} blocks does the same with its own "
                 "weights, reading the stream and adding to it. ")
        steps.append(Step(f"{stack}.blocks", f"The other {layers - 1} blocks", alike + (
            "Below, the length of each token's vector after each block: the stream grows as the blocks write."),
            "layers"))
    if f"{stack}.ln_final.hook_normalized" in held:
        steps.append(Step(f"{stack}.final_norm", f"The final {_norm_name(facts)}", (
            "A last normalisation of each token's vector, after the last block."), "matrix",
            f"{stack}.ln_final.hook_normalized"))
    return [step for step in steps if step.hook is None or step.hook in held]


def _block_outputs(facts: ModelFacts, stack: str) -> list[str]:
    """The hooks of the stream after each block, as the blocks step draws it (attention_atlas.plot.stream's
    `stream_hooks`): a decoder read block by block (`facts.block_kinds`: a hybrid's, Falcon-H1's) after every block,
    attention or not; else each layer's output (drawn from its hook_normalized_resid_post where a post-norm run
    recorded it)."""
    if stack == "decoder" and facts.block_kinds:
        return [f"decoder.blocks.{b}.hook_resid_post" for b in range(len(facts.block_kinds))]
    layers = facts.n_encoder_layers if stack == "encoder" else facts.n_decoder_layers
    return [f"{stack}.{i}.hook_resid_post" for i in range(layers)]


def _attention_steps(trace: Trace, stack: str, attention: str, site: str, held: set[str]) -> list[Step]:
    facts = trace.facts
    z = trace.captured.get(f"{attention}.hook_z")  # (heads, tokens, d_head)
    d_head = facts.d_model // facts.n_heads if z is None else z.shape[-1]
    shared = (f" Here {facts.n_heads} query heads share {facts.n_kv_heads} key and value heads."
              if facts.n_kv_heads != facts.n_heads else "")
    mask = trace.masks.get(site)  # (queries, keys), True where a key may be seen
    masked = 0 if mask is None else int((~mask).sum())
    causal = mask is not None and np.array_equal(mask, np.tril(np.ones_like(mask)))
    steps = [
        Step(f"{stack}.queries", "Queries, keys and values", (
            f"Each of the {facts.n_heads} heads makes, for every token, a query (what it looks for), a key (what it "
            f"offers) and a value (what it passes on): the vector times W_Q, W_K and W_V, each d_head = {d_head} "
            f"numbers.{shared} Shown: one head's queries."), "head", f"{attention}.hook_q", site),
        Step(f"{stack}.rotation", "Queries and keys rotated", (
            "Rotary position embeddings: each query and key is turned by angles that grow with its position, so a "
            "score depends on how far apart two tokens are. Shown: the rotated queries."), "head",
            f"{attention}.hook_rot_q", site),
        Step(f"{stack}.scores", "Scores from QKᵀ", (
            f"Every query meets every key: a dot product for each pair (QKᵀ){_scores_text(trace, attention, d_head)} "
            "One row of scores for each token."), "head", f"{attention}.hook_attn_scores", site),
        Step(f"{stack}.mask", "The mask", (
            f"{masked:,} of the scores are hidden from this head: set to −∞ (hatched), they get no weight. "
            + ("The causal mask hides each token's future: it may look only at itself and the tokens before it."
               if causal and masked else "Nothing is hidden here: every token sees every token." if not masked
               else "This run's mask hides them (a window, padding, or a mask chosen on the Masks page).")), "mask",
            f"{attention}.hook_attn_scores", site),
        Step(f"{stack}.softmax", "Softmax: the attention pattern", (
            "Each row of scores through a softmax: weights that add up to 1. Where this head looks from each "
            "token."), "pattern", None, site),
        Step(f"{stack}.values", "Weighted values", (
            "Each token's output of this head: the values weighted by its row of the pattern (A V), d_head numbers."),
            "head", f"{attention}.hook_z", site),
        Step(f"{stack}.heads_out", "Heads concatenated, times W_O", (
            f"The {facts.n_heads} heads' outputs side by side ({facts.n_heads} × {d_head} numbers) times W_O: back to "
            f"d_model = {facts.d_model}. This is what attention adds to the stream."), "matrix",
            f"{stack}.0.hook_attn_out"),
    ]
    return [step for step in steps if step.hook is None or step.hook in held]


def _scores_text(trace: Trace, attention: str, d_head: int) -> str:
    """What this run's scores are, read from it: head 0's QKᵀ (its queries and keys as attention read them) against its
    scores, one number apart (the scale), or more than that (a position bias, or a cap)."""
    captured = trace.captured
    query = captured.get(f"{attention}.hook_rot_q", captured.get(f"{attention}.hook_q"))  # (heads, q_len, d_head)
    key = captured.get(f"{attention}.hook_rot_k", captured.get(f"{attention}.hook_k"))  # (kv_heads, k_len, d_head)
    scores = captured.get(f"{attention}.hook_attn_scores")  # (heads, q_len, k_len), before the mask
    if query is None or key is None or scores is None:
        return ", then scaled as this model does (the paper divides by √d_head)."
    product = query[0].astype(np.float64) @ key[0].astype(np.float64).T  # (q_len, k_len): head 0 reads key head 0
    score = scores[0].astype(np.float64)
    usable = np.isfinite(score) & (np.abs(product) > 1e-6 * max(float(np.abs(product).max()), 1e-30))
    scale = float(np.median(score[usable] / product[usable])) if usable.any() else math.nan
    if not math.isfinite(scale) or not np.allclose(score, product * scale, rtol=1e-3,
                                                   atol=1e-4 * max(float(np.abs(score).max()), 1e-30)):
        return (f". This model's scores are not QKᵀ times one number: it adds a bias by position, or caps them "
                f"(its positions: {trace.facts.positional}).")
    if math.isclose(scale, 1 / math.sqrt(d_head), rel_tol=1e-3):
        return f", divided by √d_head = √{d_head} ({math.sqrt(d_head):.2f}) so that the softmax does not saturate."
    return f", times {scale:.4g} (this model's scale; the paper's is 1/√d_head = {1 / math.sqrt(d_head):.4g})."


def _sum_steps(facts: ModelFacts, stack: str, which: str, residual: str, norm: str, held: set[str],
               sublayer: str) -> list[Step]:
    """The residual sum after a sub-layer and, in a post-norm model, the norm of it."""
    if not facts.norm.startswith("pre") and norm in held:
        return [Step(f"{stack}.sum{which}", f"Residual and {_norm_name(facts)}", (
            f"The {sublayer}'s output added to its input (the residual connection), then normalised: "
            "LayerNorm(x + Sublayer(x)), as the paper writes it (post-norm)."), "matrix", norm)]
    return [Step(f"{stack}.sum{which}", "The residual connection", (
        f"The {sublayer}'s output added to its input: x + Sublayer(x). The stream keeps what came before and gains "
        "what this sub-layer wrote."), "matrix", residual)]


def _tokens_text(facts: ModelFacts, stack: str, count: int) -> str:
    if stack == "decoder" and facts.kind == "encoder-decoder":
        return (f"The decoder reads the output so far: a start token, then the output's tokens ({count} in all). "
                "Each step of generation adds the token it chose.")
    return (f"The tokenizer cuts the text into {count} tokens, each an id in a vocabulary of {facts.vocab_size:,}. "
            "Everything after this works on these ids, never on the letters.")


def _embedding_text(facts: ModelFacts) -> str:
    if facts.family.startswith("from-scratch"):
        return (f"Each id picks its row of the embedding matrix ({facts.vocab_size:,} × {facts.d_model}), "
                f"multiplied by √d_model = {math.sqrt(facts.d_model):.1f}, as the paper does (§3.4).")
    return (f"Each id picks its row of the embedding matrix ({facts.vocab_size:,} × {facts.d_model}): a vector of "
            f"d_model = {facts.d_model} numbers the model learned for that token.")


def _positions_text(facts: ModelFacts) -> str:
    scheme = facts.positional
    if scheme == "sinusoidal":
        return ("Attention by itself ignores order, so a vector for each position is added: sines and cosines of the "
                "position, their wavelengths growing along the dimensions (§3.5). The Positional encoding page draws "
                "them.")
    if scheme.startswith("learned"):
        return "Attention by itself ignores order, so a learned vector for each position is added to the token's."
    if scheme == "rotary":
        return ("No position vector is added here: in every block the queries and keys are rotated by angles that "
                "grow with the position (rotary embeddings), so attention sees how far apart two tokens are.")
    return (f"This model's positions: {scheme}. No position vector is added to the tokens'; the Positional encoding "
            "page shows what it does instead.")


def _norm_name(facts: ModelFacts) -> str:
    return "RMSNorm" if "RMSNorm" in facts.norm else "LayerNorm"
