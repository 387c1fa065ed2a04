"""The Tour page without a browser: every step walked with Next on the toy encoder-decoder, a toy GPT, MiniLM,
SmolLM2 and a tiny Hugging Face model of each kind; each step's shape line held to the value its own run captured
and its dimensions' names to the model's facts; the figure drawn from that value; the step in the link."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import likeliest
from attention_atlas.model.inspect.tour import shape_label, step_shape, tour_options, tour_steps
from attention_atlas.model.registry import load_runner
from tests.app.app_session import open_app_page
from tests.plotly_specs import chart, chart_specs, plotly_array

PAGE = "app_pages/tour.py"
SIZES = {"d_model": "d_model", "d_ff": "d_ff", "heads": "n_heads", "kv_heads": "n_kv_heads"}  # dimension -> fact


def _walk(at: AppTest, runner, text: str) -> list[str]:
    """Every step from the first with Next: its shape line checked; the titles seen."""
    trace = runner.run(text, None, tour_options(runner.facts))
    steps = tour_steps(trace)
    seen = []
    for index, step in enumerate(steps):
        assert at.selectbox(key="tour_step").value == index and at.query_params["step"] == str(index)
        assert at.subheader[0].value == step.title
        if step.hook is not None:
            value = trace.captured[step.hook]
            assert any(caption.value.startswith(shape_label(step.dims, value.shape)) for caption in at.caption)
            for name, size in zip(step.dims, value.shape, strict=True):
                assert name not in SIZES or size == getattr(runner.facts, SIZES[name]), (step.key, name)
                assert name != "tokens" or size in (len(trace.tokens), len(trace.target_tokens)), step.key
            if step.kind == "matrix":
                drawn = plotly_array(chart(at, step.hook)["data"][0]["z"])
                np.testing.assert_allclose(drawn, value[:48, :48], rtol=1e-6, err_msg=step.key)
        seen.append(step.title)
        if index < len(steps) - 1:
            at.button(key="tour_next").click().run()
            assert not at.exception, at.exception[0].message if at.exception else ""
    assert at.button(key="tour_next").disabled  # the last step
    return seen


@pytest.mark.parametrize("model_id", ["toy-date", "toy-gpt-date", "minilm", "smollm2"])
def test_every_step_of_a_shipped_model(model_id: str) -> None:
    text = {"minilm": "the cat sat on the mat", "smollm2": "The capital of France is"}.get(model_id, "march 3 2021")
    at = open_app_page(PAGE, model_id, text)
    seen = _walk(at, load_runner(model_id), text)
    if model_id == "toy-date":
        assert "Cross-attention over the encoder's output" in seen and seen[0] == "The encoder: tokens"
    if model_id == "smollm2":
        assert "Queries and keys rotated" in seen and "The final RMSNorm" in seen
    assert ("The output: a vector per token" in seen) == (model_id == "minilm")


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "bart", "bert"])
def test_every_step_of_a_tiny_hugging_face_model(folders, family: str) -> None:
    at = open_app_page(PAGE, folder=str(folders[family]), text="the quick brown fox")
    _walk(at, load_hf_runner(str(folders[family])), "the quick brown fox")


def test_the_next_token_is_the_models_and_the_link_opens_a_step() -> None:
    at = open_app_page(PAGE, "toy-gpt-date", "march 3 2021", params={"step": "3", "tour_head": "2"})
    assert at.selectbox(key="tour_step").value == 3 and at.subheader[0].value == "The residual stream"
    runner = load_runner("toy-gpt-date")
    trace = runner.run("march 3 2021", None, tour_options(runner.facts))
    keys = [step.key for step in tour_steps(trace)]
    at.selectbox(key="tour_step").set_value(keys.index("decoder.softmax")).run()  # one head's pattern
    assert at.selectbox(key="tour_head").value == 2
    pattern = plotly_array(chart(at, "the attention pattern")["data"][0]["z"])
    expected = trace.head_pattern("decoder.attn", 0, 2)[:48, :48]
    np.testing.assert_allclose(pattern, np.where(trace.masks["decoder.attn"][:48, :48], expected, np.nan), rtol=1e-6)
    at.selectbox(key="tour_step").set_value(len(keys) - 1).run()
    bars = chart(at, "After")["data"][0]
    assert any("The output: " in m.value for m in at.markdown)
    assert plotly_array(bars["x"])[0] == pytest.approx(max(plotly_array(bars["x"])))
    at.button(key="tour_back").click().run()
    assert at.query_params["step"] == str(len(keys) - 2)


def test_presenter_mode_hides_the_sidebar_and_enlarges_the_figures() -> None:
    at = open_app_page(PAGE, "toy-date", "march 3 2021", params={"step": "7"})
    assert chart(at, "the attention pattern")["layout"].get("font") is None and not at.get("html")[1:]
    at.toggle(key="tour_present").set_value(True).run()
    styles = [element.proto.body for element in at.get("html")]
    assert any("stSidebar" in style and "display: none" in style for style in styles)
    layout = chart(at, "the attention pattern")["layout"]
    assert layout["font"]["size"] == 17 and layout["height"] == 480
    assert at.query_params["present"] == "1" and at.query_params["step"] == "7"


def test_the_diagram_is_the_models_pass_with_its_live_shapes() -> None:
    """toy-date's diagram: a marker a step, each labelled with its step and the shape it computes, the encoder's
    output joined to the decoder's cross-attention, the current step lit."""
    at = open_app_page(PAGE, "toy-date", "march 3 2021", params={"step": "5"})
    runner = load_runner("toy-date")
    trace = runner.run("march 3 2021", None, tour_options(runner.facts))
    steps = tour_steps(trace)
    spec = next(s for s in chart_specs(at) if len(s["data"]) == 3)  # the line, the join, the markers
    markers = spec["data"][-1]
    assert len(markers["text"]) == len(steps) == len(markers["marker"]["size"])
    for text, step in zip(markers["text"], steps, strict=True):
        sizes = step_shape(trace, step)[1]
        assert step.label in text and (not sizes or " × ".join(f"{n:,}" for n in sizes) in text), text
    assert markers["marker"]["size"].index(max(markers["marker"]["size"])) == 5
    join = spec["data"][1]["y"]
    assert (-join[0], -join[-1]) == (max(i for i, s in enumerate(steps) if s.stack == "encoder"),
                                     [s.key for s in steps].index("decoder.cross"))


def test_predict_then_reveal_asks_before_it_shows() -> None:
    """The softmax step with "Predict" on: the pattern hidden until Reveal, then drawn with the right key outlined
    and the guess told; the next-token step likewise, its answer the model's likeliest."""
    runner = load_runner("toy-gpt-date")
    trace = runner.run("march 3 2021", None, tour_options(runner.facts))
    keys = [step.key for step in tour_steps(trace)]
    at = open_app_page(PAGE, "toy-gpt-date", "march 3 2021",
                       params={"step": str(keys.index("decoder.softmax")), "predict": "1", "tour_head": "1"})
    assert not [s for s in chart_specs(at) if "attention pattern" in s["layout"].get("title", {}).get("text", "")]
    assert at.button(key="tour_reveal").disabled  # a guess first
    pattern = trace.head_pattern("decoder.attn", 0, 1)[23]  # the last row: every key seen (causal, the last token)
    right = int(pattern.argmax())
    at.selectbox(key="tour_guess").set_value(right).run()
    at.button(key="tour_reveal").click().run()
    figure = chart(at, "attention pattern")
    outline = figure["layout"]["shapes"][-1]
    assert (outline["x0"] + 0.5, outline["y0"] + 0.5) == (right, 23)
    assert any("You had it." in m.value.replace("\\", "") for m in at.markdown)
    at.selectbox(key="tour_step").set_value(len(keys) - 1).run()  # the next token: asked anew
    assert not [s for s in chart_specs(at) if s["layout"].get("title", {}).get("text", "").startswith("After")]
    choices = at.selectbox(key="tour_guess").options
    best = likeliest(runner, trace, -1, 1)[0][0]
    wrong = next(i for i, choice in enumerate(choices) if choice != repr(best))
    at.selectbox(key="tour_guess").set_value(wrong).run()
    at.button(key="tour_reveal").click().run()
    assert any(f"The answer: {best!r}. You chose" in m.value.replace("\\", "") for m in at.markdown)
    colours = chart(at, "After")["data"][0]["marker"]["color"]
    assert colours[0] == "#d62728" and set(colours[1:]) == {"#9aa5b1"}
