"""Tiny random Hugging Face models and tokenizers, built in a folder (no hub): one per family."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors

WORDS = "the a cat dog sat on mat fox quick brown jumps over lazy paris is capital of france".split()


def _tokenizer(specials: dict[str, str], template: str) -> transformers.PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer; `template` adds the specials, e.g. '[CLS] $A [SEP]'."""
    vocab = {tok: i for i, tok in enumerate([*dict.fromkeys(specials.values()), *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    special_ids = [(t, vocab[t]) for t in template.split() if t != "$A"]
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=special_ids)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **specials)


BERT_SPECIALS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}


def bert_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """The word-level tokenizer of the tiny encoders: [CLS] text [SEP], 22 tokens."""
    return _tokenizer(BERT_SPECIALS, "[CLS] $A [SEP]")
LM_SPECIALS = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}


def _configs(vocab: int) -> dict[str, tuple[transformers.PretrainedConfig, type, dict, str]]:
    small = {"vocab_size": vocab}
    return {
        "bert": (transformers.BertConfig(**small, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64),
                 transformers.BertModel, BERT_SPECIALS, "[CLS] $A [SEP]"),
        "gpt2": (transformers.GPT2Config(**small, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                         bos_token_id=2, eos_token_id=3, pad_token_id=0),
                 transformers.GPT2LMHeadModel, LM_SPECIALS, "$A"),
        "llama": (transformers.LlamaConfig(**small, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                           bos_token_id=2, eos_token_id=3, pad_token_id=0),
                  transformers.LlamaForCausalLM, LM_SPECIALS, "<s> $A"),
        "t5": (transformers.T5Config(**small, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     pad_token_id=0, eos_token_id=3, decoder_start_token_id=0),
               transformers.T5ForConditionalGeneration, LM_SPECIALS, "$A </s>"),
        "bart": (transformers.BartConfig(**small, d_model=32, encoder_layers=2, decoder_layers=2,
                                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                         decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0,
                                         bos_token_id=2, eos_token_id=3, decoder_start_token_id=3),
                 transformers.BartForConditionalGeneration, LM_SPECIALS, "<s> $A </s>"),
        "marian": (transformers.MarianConfig(**small, d_model=32, encoder_layers=2, decoder_layers=2,
                                             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                             decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0,
                                             eos_token_id=3, decoder_start_token_id=0),
                   transformers.MarianMTModel, LM_SPECIALS, "$A </s>"),
    }


FAMILIES = ("bert", "gpt2", "llama", "t5", "bart", "marian")


def config(family: str, **overrides: object) -> transformers.PretrainedConfig:
    """The tiny `family` model's config, with `overrides` (e.g. max_position_embeddings=4096)."""
    specials = BERT_SPECIALS if family == "bert" else LM_SPECIALS
    chosen = _configs(len(dict.fromkeys(specials.values())) + len(WORDS))[family][0]
    chosen.update(overrides)
    return chosen


def build(family: str, folder: Path, safe: bool = True, **overrides: object) -> Path:
    """Save a tiny random `family` model and its tokenizer into `folder` (safe=False: as a pickle only), its
    config changed by `overrides` (e.g. max_position_embeddings=4096)."""
    specials = BERT_SPECIALS if family == "bert" else LM_SPECIALS
    _, model_class, specials, template = _configs(len(dict.fromkeys(specials.values())) + len(WORDS))[family]
    torch.manual_seed(0)
    model = model_class(config(family, **overrides)).eval()
    model.save_pretrained(folder)
    if not safe:
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    _tokenizer(specials, template).save_pretrained(folder)
    return folder


# Every other model type the app opens, tiny and random, built from its config class: model type -> the config's
# settings beyond the shared ones. Sliding windows of 3 tokens, so that they hide keys of a ten-token text.
SHARED = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 64, "max_position_embeddings": 64, "bos_token_id": 2, "eos_token_id": 3,
          "pad_token_id": 0}
DECODER_TYPES: dict[str, dict[str, object]] = {
    "mistral": {"sliding_window": 3},
    "qwen2": {},
    "qwen3": {"head_dim": 8},  # query and key norms
    "gemma": {"head_dim": 8},  # embeddings x sqrt(d_model)
    "gemma2": {"head_dim": 8, "sliding_window": 3, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0},
    "gemma3_text": {"head_dim": 8, "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"]},
    "phi": {"partial_rotary_factor": 0.5},  # attention and MLP in parallel, one norm
    "phi3": {"sliding_window": 3},  # fused query/key/value and gate/up projections
    "olmo": {},  # LayerNorm without weights
    "olmo2": {},  # norms after each sublayer, query and key norms
    "gpt_neox": {"rotary_pct": 0.5, "num_key_value_heads": 4},  # Pythia: parallel, fused projections
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32, "num_key_value_heads": 4},  # learned positions
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64, "n_inner": 64,
             "num_key_value_heads": 4},
    "codegen": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64, "n_inner": 64,
                "num_key_value_heads": 4},  # a fused projection that no fused layout fits: its hook_q, hook_k apart
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 8, "sliding_window": 3},
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},  # experts, query and key norms
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 32},  # experts beside a shared expert
    "starcoder2": {"sliding_window": 3},
    "cohere": {},  # parallel, LayerNorm without bias
    "smollm3": {},
    # computing attention in their own code (model/hf/own_attention.py)
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": 3,  # unscaled, every other layer local
                "intermediate_size": None},  # 4 d_model, as TransformerLens reads it
    "bloom": {},  # ALiBi; attention and MLP modules that add the residual themselves
    "falcon": {"new_decoder_architecture": True, "num_kv_heads": 2, "ffn_hidden_size": 64},  # grouped, parallel
    "mpt": {"d_model": 32, "n_heads": 4, "n_layers": 2, "expansion_ratio": 2, "max_seq_len": 64, "bos_token_id": 2,
            "eos_token_id": 3, "pad_token_id": 0, "attn_config": {"alibi": True}},  # ALiBi; its MLP adds the residual
}
OWN_NAMES = {"mpt"}  # configs that name their sizes their own way (d_model, n_heads ...): built without SHARED
# Multi-head latent attention (DeepSeek): q/k heads nope + rope = 12 wide, value heads 6 (not in TYPES: the pages
# that read a head's weights as one d_head do not serve them; tests/model/test_value_width.py holds what does).
MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6, "num_key_value_heads": 4,
       "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
       "first_k_dense_replace": 1}  # layer 0's MLP dense, layer 1's experts
MLA_TYPES: dict[str, dict[str, object]] = {
    "deepseek_v2": {**MLA, "q_lora_rank": None},  # q_proj
    "deepseek_v3": {**MLA, "q_lora_rank": 16, "n_group": 2, "topk_group": 1},  # q_a_proj, its norm, q_b_proj
}
DISTINCT_NORMS = {"falcon"}  # two norms read the block's input (ln_attn, ln_mlp): made unlike, as trained ones are
ENCODER_TYPES: dict[str, tuple[str, dict[str, object]]] = {  # type -> (its model class in transformers, settings)
    "deberta-v2": ("DebertaV2Model", {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                      "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0,
                                      "relative_attention": True, "pos_att_type": ["p2c", "c2p"],
                                      "position_biased_input": False, "position_buckets": 4,
                                      "max_relative_positions": 16, "norm_rel_ebd": "layer_norm",
                                      "share_att_key": True}),  # v3's settings; buckets beyond a distance of 2
    "albert": ("AlbertModel", {"hidden_size": 32, "embedding_size": 16, "num_hidden_layers": 3,
                               "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
                               "pad_token_id": 0}),  # one layer's weights in every block, E = 16 < H = 32
    "roberta": ("RobertaModel", {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                 "intermediate_size": 64, "max_position_embeddings": 70, "pad_token_id": 0}),
    "distilbert": ("DistilBertModel", {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64,
                                       "max_position_embeddings": 64, "pad_token_id": 0}),
    "modernbert": ("ModernBertModel", {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                       "intermediate_size": 64, "max_position_embeddings": 64,
                                       "pad_token_id": 0, "local_attention": 4,  # layer 1 sees 2 each side
                                       "global_attn_every_n_layers": 2}),
}
SEQ2SEQ_SHARED: dict[str, object] = {
    "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64, "pad_token_id": 0, "eos_token_id": 3,
    "decoder_start_token_id": 0}
SEQ2SEQ_TYPES: dict[str, dict[str, object]] = {
    "mt5": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4, "pad_token_id": 0,
            "eos_token_id": 3, "decoder_start_token_id": 0},  # a gated MLP
    "mbart": SEQ2SEQ_SHARED,  # pre-norm
    "pegasus": SEQ2SEQ_SHARED,
}
TYPES = (*DECODER_TYPES, *ENCODER_TYPES, *SEQ2SEQ_TYPES)


def build_type(model_type: str, folder: Path, **overrides: object) -> Path:
    """Save a tiny random model of `model_type` (one of TYPES or MLA_TYPES) and a word-level tokenizer into `folder`; a
    decoder's config changed by `overrides` (e.g. num_hidden_layers=1)."""
    torch.manual_seed(0)
    vocab = len(dict.fromkeys(LM_SPECIALS.values())) + len(WORDS)
    if model_type in DECODER_TYPES or model_type in MLA_TYPES:
        settings = ({} if model_type in OWN_NAMES else SHARED) | (DECODER_TYPES | MLA_TYPES)[model_type] | overrides
        config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **settings)
        model, specials, template = transformers.AutoModelForCausalLM.from_config(config), LM_SPECIALS, "<s> $A"
        if model_type in DISTINCT_NORMS:
            with torch.no_grad():
                for name, parameter in model.named_parameters():
                    if ".ln_" in name:
                        parameter.uniform_(0.5, 1.5)
    elif model_type in ENCODER_TYPES:
        model_class, settings = ENCODER_TYPES[model_type]
        vocab = len(dict.fromkeys(BERT_SPECIALS.values())) + len(WORDS)
        config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **settings)
        model, specials, template = getattr(transformers, model_class)(config), BERT_SPECIALS, "[CLS] $A [SEP]"
    else:
        config = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **SEQ2SEQ_TYPES[model_type])
        model, specials, template = transformers.AutoModelForSeq2SeqLM.from_config(config), LM_SPECIALS, "$A </s>"
    model.eval().save_pretrained(folder)
    _tokenizer(specials, template).save_pretrained(folder)
    return folder


def log_probs_with_columns_zeroed(model: torch.nn.Module, projection: torch.nn.Module, ids: list[int],
                                  columns: slice) -> np.ndarray:
    """(len, vocab): the model's next-token log-probabilities on `ids` with `columns` of `projection`'s input
    zeroed (a head's share of the output projection's input: the ablation by zero, done by hand)."""

    def zero(module: torch.nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        x = args[0].clone()  # (1, len, heads * d_head)
        x[..., columns] = 0
        return (x,)

    handle = projection.register_forward_pre_hook(zero)
    try:
        with torch.inference_mode():
            return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].log_softmax(-1).numpy()
    finally:
        handle.remove()
