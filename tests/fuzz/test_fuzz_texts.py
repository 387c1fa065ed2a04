"""Odd texts: every Unicode category (controls, format characters, right-to-left text and overrides, combining marks,
lone surrogates as a link's %ED%A0%80 may carry) and very long ones, into the text checks and the tokenising step of
every toy model and of MiniLM. Each tokenises, or is refused with a UserError whose message is a sentence, within a
second."""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.text_checks import validate_text
from attention_atlas.model.hf.runner import MAX_TEXT_CHARS
from attention_atlas.model.registry import list_model_ids, load_runner
from tests.fuzz.outcomes import counter, examples, is_sentence, within_limit

TOYS = [model_id for model_id in list_model_ids() if model_id.startswith("toy-")]
ODD = st.characters(codec="utf-8") | st.sampled_from(
    "\u202e\u202d\u200f\u200e\u200b\u200d\u2028\u2029\u0301\u0338\ufeff\ufffd\x00\x1b\x7f\x85\u00a0\u3000")
KNOWN = st.sampled_from(string.ascii_lowercase + string.digits + " -=:,")  # the toy models' characters, and some
RARE = st.characters(categories=["Cs", "Cc", "Cf", "Mn", "Zl", "Zp"])  # surrogates, controls, format, marks, breaks
SHORT = st.text(ODD, max_size=60) | st.text(KNOWN | ODD, max_size=60) | st.text(KNOWN, max_size=80) | st.text(
    RARE, max_size=8)
TEXTS = SHORT | st.tuples(st.text(ODD, min_size=1, max_size=8), st.integers(100, 20_000)).map(
    lambda drawn: drawn[0] * drawn[1])  # long: up to 160,000 characters
TOKENISED = counter("test_fuzz_texts: toy models")
MINILM = counter("test_fuzz_texts: minilm")


@pytest.fixture(scope="module")
def toys() -> dict:
    return {model_id: load_runner(model_id) for model_id in TOYS}


@pytest.fixture(scope="module")
def minilm():
    return load_runner("minilm")


def _refused(error: UserError, text: str) -> None:
    assert is_sentence(str(error)), (text[:100], str(error))


def test_odd_texts_tokenise_on_a_toy_model_or_are_refused_with_a_sentence(toys: dict) -> None:
    @given(st.sampled_from(TOYS), TEXTS, st.booleans())
    @example("toy-gpt-date", "=", False)  # the separator the model adds itself: nothing left
    @example("toy-reverse", "\u200d", True)  # a zero-width joiner as a target
    @examples(150)
    def check(model_id: str, text: str, as_target: bool) -> None:
        toy = toys[model_id].toy
        with within_limit(lambda: f"{model_id} {text[:60]!r} ({len(text)} characters)"):
            try:
                ids = toy.encode_target(text) if as_target else toy.encode_source(text)
                toys[model_id].cautions(text)  # the caution of a text longer than the training examples
            except UserError as error:
                _refused(error, text)
                TOKENISED["refused with a sentence"] += 1
                return
        assert ids and all(isinstance(i, int) for i in ids)
        TOKENISED["tokenised"] += 1

    check()
    assert TOKENISED["tokenised"] and TOKENISED["refused with a sentence"], TOKENISED


def test_odd_texts_tokenise_on_minilm_or_are_refused_with_a_sentence(minilm) -> None:
    """The Hugging Face runner's steps before its forward pass: the text checks, then the tokenizer and its limit."""
    @given(TEXTS)
    @example("\u202egnp.exe")
    @example("a" * (MAX_TEXT_CHARS + 1))
    @examples(100)
    def check(text: str) -> None:
        with within_limit(lambda: f"{text[:60]!r} ({len(text)} characters)"):
            try:
                ids = minilm.text.encode(validate_text(text, MAX_TEXT_CHARS))
            except UserError as error:
                _refused(error, text)
                MINILM["refused with a sentence"] += 1
                return
        assert len(ids) >= 2 and ids[0] == minilm.tokenizer.cls_token_id
        MINILM["tokenised"] += 1

    check()
    assert MINILM["tokenised"] and MINILM["refused with a sentence"], MINILM
