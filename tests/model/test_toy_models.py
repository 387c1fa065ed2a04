"""The shipped toy models: accurate on held-out examples, and traced as a person will see them."""

import numpy as np
import pytest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.registry import list_model_ids, load_runner
from attention_atlas.model.toy.evaluate import exact_match
from attention_atlas.model.toy.store import available_toys, load_toy
from attention_atlas.model.toy.tasks import TASKS, make_examples
from attention_atlas.model.toy.train import TRAIN_SEED, VALIDATION_SEED

HELD_OUT_SEED = 2026
assert HELD_OUT_SEED not in (TRAIN_SEED, VALIDATION_SEED)


def test_every_task_ships_a_trained_model() -> None:
    assert available_toys() == list(TASKS)
    assert list_model_ids()[: len(TASKS)] == [f"toy-{name}" for name in TASKS]


@pytest.mark.slow  # hundreds of held-out examples decoded a model
@pytest.mark.parametrize("task", list(TASKS))
def test_exact_match_on_held_out_examples(task: str) -> None:
    toy = load_toy(task)
    pairs = make_examples(TASKS[task], 1000, HELD_OUT_SEED)
    accuracy = exact_match(toy, pairs)
    assert accuracy >= 0.99, f"{task}: {accuracy:.1%} exact match"


@pytest.mark.parametrize(
    ("model_id", "text", "expected"),
    [("toy-copy", "hello world", "hello world"), ("toy-reverse", "attention", "noitnetta"),
     ("toy-date", "march 3 2021", "2021-03-03"), ("toy-gpt-date", "14 feb 1999", "1999-02-14"),
     ("toy-induction", "qwertyuiop", "qwertyuiop"), ("toy-sort", "stressed", "deerssst")],
)
def test_generated_output(model_id: str, text: str, expected: str) -> None:
    trace = load_runner(model_id).run(text)
    assert trace.output_text == expected


def test_encoder_decoder_trace_has_every_site() -> None:
    runner = load_runner("toy-reverse")
    trace = runner.run("hello")
    heads = runner.facts.n_heads
    assert trace.tokens == ["h", "e", "l", "l", "o", "</s>"]
    assert trace.target_tokens == ["<s>", "o", "l", "l", "e", "h"]
    assert trace.attention["encoder.0.attn.hook_pattern"].shape == (heads, 6, 6)
    assert trace.attention["decoder.1.attn.hook_pattern"].shape == (heads, 6, 6)
    assert trace.attention["decoder.1.cross_attn.hook_pattern"].shape == (heads, 6, 6)
    assert trace.masks["decoder.attn"].tolist() == np.tril(np.ones((6, 6), bool)).tolist()
    assert trace.masks["encoder.attn"].all()
    for pattern in trace.attention.values():
        np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date"])
def test_each_generation_step_matches_the_full_trace(model_id: str) -> None:
    """The attention captured while decoding step by step equals the rows of the final causal pass."""
    trace = load_runner(model_id).run("june 5 1990")
    first_query = len(trace.tokens) - len(trace.steps) if not trace.target_tokens else 0
    for step_index, step in enumerate(trace.steps):
        for name, row in step.attention.items():
            full = trace.attention[name][:, first_query + step_index, : row.shape[-1]]
            np.testing.assert_allclose(row, full, atol=1e-5)


def test_causal_on_zeroes_the_encoder_upper_triangle() -> None:
    runner = load_runner("toy-reverse")
    plain = runner.run("hello", options=RunOptions(causal="auto"))
    causal = runner.run("hello", options=RunOptions(causal="on"))
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert plain.attention["encoder.0.attn.hook_pattern"][:, upper].min() > 0
    assert (causal.attention["encoder.0.attn.hook_pattern"][:, upper] == 0).all()
    assert not causal.masks["encoder.attn"][upper].any()


def test_causal_off_lets_the_decoder_look_ahead() -> None:
    trace = load_runner("toy-gpt-date").run("may 1 2000", options=RunOptions(causal="off"))
    assert trace.masks["decoder.attn"].all()
    assert trace.attention["decoder.0.attn.hook_pattern"][:, 0, 1:].sum() > 0


def test_padding_and_blocked_positions_get_zero_attention() -> None:
    runner = load_runner("toy-copy")
    trace = runner.run("abc", options=RunOptions(pad_to=8, blocked=((1, 2),)))
    assert trace.tokens == ["a", "b", "c", "</s>", "<pad>", "<pad>", "<pad>", "<pad>"]
    for name, pattern in trace.attention.items():
        if name.startswith("encoder") or ".cross_attn." in name:
            assert (pattern[..., 4:] == 0).all(), name
    assert (trace.attention["encoder.0.attn.hook_pattern"][:, 1, 2] == 0).all()
    assert trace.output_text == "abc"


def test_teacher_forcing_traces_the_given_target() -> None:
    trace = load_runner("toy-date").run("march 3 2021", target="2021-03-03")
    assert trace.target_tokens == ["<s>", *"2021-03-03"]
    assert trace.output_text == "2021-03-03"
    assert trace.outputs["log_probs"].shape == (11, trace.facts.vocab_size)
