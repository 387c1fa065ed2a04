"""Unusable text gets a ValueError that names the problem and what is allowed."""

import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import load_runner


@pytest.fixture(scope="module")
def reverse():
    return load_runner("toy-reverse")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("Hello!", r"does not know: 'H', '!'.*Allowed: abcdefghijklmnopqrstuvwxyz and space"),
        ("héllo", "does not know: 'é'"),
        ("a" * 64, "has 64 characters; this model accepts at most 63"),
        ("ab\x00c", r"control characters.*U\+0000 \(NULL\)|control characters.*U\+0000"),
        ("ab\x1bc\x07", "control characters"),
        ("\u200b", "does not know: U\\+200B"),
    ],
)
def test_bad_source_text(reverse, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reverse.run(text)


def test_bad_target_text(reverse) -> None:
    with pytest.raises(ValueError, match="The target contains characters"):
        reverse.run("abc", target="ABC")


def test_decoder_only_refuses_its_separator() -> None:
    with pytest.raises(ValueError, match="does not know: '='"):
        load_runner("toy-gpt-date").run("may 1=2000")


def test_decoder_only_limit_leaves_room_for_the_answer() -> None:
    runner = load_runner("toy-gpt-date")
    with pytest.raises(ValueError, match="at most 30"):
        runner.run("a" * 31)


def test_blocking_a_whole_row_is_refused(reverse) -> None:
    blocked = tuple((0, k) for k in range(4))
    with pytest.raises(ValueError, match="hides every key from query position"):
        reverse.run("abc", options=RunOptions(blocked=blocked))


def test_blocked_position_outside_the_matrix(reverse) -> None:
    with pytest.raises(ValueError, match="outside the 4 x 4"):
        reverse.run("abc", options=RunOptions(blocked=((9, 0),)))


def test_unknown_model_id() -> None:
    with pytest.raises(ValueError, match="unknown model 'toy-nope'; known models: toy-copy"):
        load_runner("toy-nope")
