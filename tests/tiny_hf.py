"""Tiny random Hugging Face models and tokenizers, built in a folder (no hub): one per family."""

from __future__ import annotations

from pathlib import Path

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
