"""attention_atlas.plot draws the app's figures: each function, on a trace made with the Python API, gives the figure
its page draws in AppTest for the same model, text and choice (the same plotly spec: data arrays, layout, title), on
the toy encoder-decoder and decoder and a tiny random Hugging Face encoder, decoder and encoder-decoder. Each model's
app session is opened once and shared by its tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io
import pytest
from streamlit.testing.v1 import AppTest

import attention_atlas as aa
from attention_atlas import plot
from attention_atlas.model.core.trace.trace import Trace
from tests.app.app_session import open_app_page
from tests.plotly_specs import chart_specs, plotly_array
from tests.tiny_hf import build, build_type

MODELS = ("toy-date", "toy-gpt-date", "bert", "llama", "bart")  # toy models by id, the rest tiny Hugging Face folders
TEXTS = {"toy-date": "march 3 2021", "toy-gpt-date": "march 3 2021"}
WORDS = "the cat sat on the mat"


@dataclass
class Session:
    """One model's app session (AppTest) and the same model loaded with the Python API, on the same text."""

    at: AppTest
    model: aa.Model
    text: str
    trace: Trace  # model.run(text): every attention pattern, as the frame records them


@pytest.fixture(scope="module")
def sessions() -> dict[str, Session]:
    """Made on first use per model, kept for the module's tests."""
    return {}


def session(sessions: dict[str, Session], tmp_path_factory, name: str) -> Session:
    if name not in sessions:
        folder = None if name.startswith("toy-") else str(build(name, tmp_path_factory.mktemp(name) / name))
        text = TEXTS.get(name, WORDS)
        at = open_app_page("app_pages/attention.py", name, text, folder)
        model = aa.load(folder or name)
        sessions[name] = Session(at, model, text, model.run(text))
    return sessions[name]


@pytest.fixture(params=MODELS)
def s(request, sessions, tmp_path_factory) -> Session:
    return session(sessions, tmp_path_factory, request.param)


def spec(figure: go.Figure) -> dict:
    """A figure as st.plotly_chart sends it."""
    return json.loads(plotly.io.to_json(figure, validate=False))


def title(drawn: dict) -> str:
    return drawn["layout"].get("title", {}).get("text", "")


CLICK_HINT = "click: why here?"


def assert_page_drew(at: AppTest, figure: go.Figure) -> None:
    """The page's run drew a chart with the figure's title, and it is the figure: the same data and layout."""
    expected = spec(figure)
    drawn = [d for d in chart_specs(at) if title(d) == title(expected)]
    assert drawn, f"the page drew no {title(expected)!r}; it drew {[title(d) for d in chart_specs(at)]}"
    page_data = [t for t in drawn[0]["data"] if CLICK_HINT not in t.get("hovertemplate", "")]  # the page's own
    # layer of invisible markers a click on a cell selects (viz/score_parts.clickable_cells) is no part of the figure
    assert len(page_data) == len(expected["data"])
    for i, (page_trace, plot_trace) in enumerate(zip(page_data, expected["data"], strict=True)):
        assert page_trace == plot_trace, f"{title(expected)!r}: trace {i} differs"
    assert drawn[0]["layout"] == expected["layout"]


def open_tab(at: AppTest, key: str, view: str) -> AppTest:
    at.session_state[key] = view
    at.run()
    assert not at.exception, at.exception[0].message
    return at


def test_the_attention_page_draws_head_model_view_and_lines(s: Session) -> None:
    at = open_tab(s.at.switch_page("app_pages/attention.py"), "view", "Model view")
    first = s.trace.sites()[0]
    assert at.radio(key="site").value == first
    assert_page_drew(at, plot.model_view(s.trace))  # the site the page opens on
    site = s.trace.sites()[-1]  # cross-attention where there is one
    layer = s.trace.n_layers(site) - 1
    name = s.trace.pattern_name(site, layer)
    at.radio(key="site").set_value(site).run()
    at.selectbox(key="layer").set_value(layer).run()
    at.selectbox(key="head").set_value(1).run()
    assert_page_drew(at, plot.model_view(s.trace, site))
    open_tab(at, "view", "One head")
    assert_page_drew(at, plot.head(s.trace, name, 1))
    assert spec(plot.head(s.trace, name, 2))["data"] != spec(plot.head(s.trace, name, 1))["data"]  # it can fail
    at.toggle(key="attention_hide_special").set_value(True).run()
    at.selectbox(key="attention_colorscale").set_value("Magma").run()
    assert_page_drew(at, plot.head(s.trace, name, 1, hide_special=True, colorscale="Magma"))
    at.toggle(key="attention_hide_special").set_value(False).run()
    at.selectbox(key="attention_colorscale").set_value("Viridis").run()
    open_tab(at, "view", "Token lines")
    assert_page_drew(at, plot.lines(s.trace, name))
    last = len(s.trace.query_tokens(site)) - 1  # a generated output may be one token long
    at.selectbox(key="attention_lines_focus").set_value(last).run()
    at.multiselect(key="attention_lines_heads").set_value([0, 2]).run()
    assert_page_drew(at, plot.lines(s.trace, name, heads=[0, 2], focus=last))


def test_the_masks_and_positional_pages_draw_masks_and_the_sinusoid(s: Session) -> None:
    at = open_tab(s.at.switch_page("app_pages/masks.py"), "masks_view", "Masks of this run")
    for site in s.trace.masks:
        assert_page_drew(at, plot.masks(s.trace, site))
    assert plot.masks(s.trace).layout.title.text == plot.masks(s.trace, next(iter(s.trace.masks))).layout.title.text
    at = open_tab(at.switch_page("app_pages/positions.py"), "positions_view", "Sinusoid")
    assert_page_drew(at, plot.positional(s.trace))
    at.number_input(key="positions_length").set_value(7).run()
    assert_page_drew(at, plot.positional(length=7, d_model=s.trace.facts.d_model))


def test_the_activations_page_draws_the_residual_stream_and_the_logit_lens(s: Session) -> None:
    at = open_tab(s.at.switch_page("app_pages/activations.py"), "activations_view", "Residual stream")
    with pytest.raises(ValueError, match=r"model\.run\(text, hooks=.*hook_resid_\*"):
        plot.residual(s.trace)  # patterns only
    post_norm = s.trace.facts.norm.startswith("post")  # the stream its next layer reads is the normalised one
    streamed = s.model.run(s.text, hooks=("*hook_resid*", *(["*hook_normalized_resid_post"] if post_norm else [])))
    assert_page_drew(at, plot.residual(streamed))
    at.selectbox(key="activations_residual_measure").set_value("cosine between consecutive layers").run()
    assert_page_drew(at, plot.residual(streamed, measure="cosine"))
    at.selectbox(key="activations_residual_measure").set_value("‖residual‖ at each boundary").run()
    at.radio(key="activations_residual_scale").set_value("log₁₀").run()
    assert_page_drew(at, plot.residual(streamed, scale="log"))
    at = open_tab(at, "activations_view", "Logit lens")
    if s.trace.facts.kind == "encoder":  # no unembedding: the page says so, and the figure raises the same sentence
        with pytest.raises(ValueError) as error:
            plot.logit_lens(streamed, s.model)
        assert str(error.value) in [info.value for info in at.info]
        return
    assert_page_drew(at, plot.logit_lens(streamed, s.model))


def test_the_generate_page_draws_the_rows_of_each_generated_token(s: Session) -> None:
    at = s.at.switch_page("app_pages/generate.py").run()
    if s.trace.facts.kind == "encoder":
        with pytest.raises(ValueError, match="is an encoder"):
            plot.generation(s.model, s.text)
        assert any("is an encoder" in info.value for info in at.info)
        return
    at.button(key="generate_run").click().run()
    assert not at.exception
    assert_page_drew(at, plot.generation(s.model, s.text))
    assert_page_drew(at, plot.generation(s.model, s.text, layer=0))
    if s.trace.facts.kind == "encoder-decoder":
        at.selectbox(key="generate_layer").set_value(1).run()
        assert_page_drew(at, plot.generation(s.model, s.text, kind="cross"))
        assert_page_drew(at, plot.generation(s.model, s.text, kind="cross", layer=1))
    at.selectbox(key="generate_pick").set_value(0).run()
    assert_page_drew(at, plot.generation(s.model, s.text, step=0))


def test_a_mistake_says_what_to_do(sessions, tmp_path_factory) -> None:
    s = session(sessions, tmp_path_factory, "toy-date")
    with pytest.raises(ValueError, match=re.escape("its sites: 'encoder.attn', 'decoder.attn', 'decoder.cross_attn'")):
        plot.model_view(s.trace, "encoder.cross_attn")
    with pytest.raises(ValueError, match=r"decoder has 2 layers \(0–1\), not 5"):
        plot.head(s.trace, "decoder.5.attn.hook_pattern", 0)
    with pytest.raises(ValueError, match="head 4 does not exist"):
        plot.head(s.trace, "decoder.1.attn.hook_pattern", 4)
    encoder_only = s.model.run(s.text, hooks="encoder.*.hook_pattern")
    with pytest.raises(ValueError, match=r"model\.run\(text, hooks='decoder.1.cross_attn.hook_pattern'\)"):
        plot.lines(encoder_only, "decoder.1.cross_attn.hook_pattern")
    with pytest.raises(ValueError, match=r"hooks='decoder.\*.hook_normalized_resid_post'"):
        plot.logit_lens(s.trace, s.model)
    with pytest.raises(ValueError, match="made by toy-date, not by toy-gpt-date"):
        plot.logit_lens(s.trace, aa.load("toy-gpt-date"))
    with pytest.raises(ValueError, match="needs a trace, or both"):
        plot.positional(length=8)
    with pytest.raises(ValueError, match="must be even"):
        plot.positional(length=8, d_model=7)
    with pytest.raises(ValueError, match="measure is one of"):
        plot.residual(s.trace, measure="size")



def test_attentions_share_where_the_blocks_run_side_by_side_is_of_the_sum_it_went_into(tmp_path) -> None:
    """GPT-NeoX adds attention and the MLP to the same stream (no resid_mid): attention's share is of resid_post."""
    trace = aa.load(build_type("gpt_neox", tmp_path / "neox")).run("the cat sat on the mat", hooks="*")
    assert "decoder.0.hook_resid_mid" not in trace.names()
    drawn = plotly_array(json.loads(plot.residual(trace, measure="attn_share").to_json())["data"][0]["z"])

    def norm(name: str) -> np.ndarray:  # (layers, pos)
        return np.linalg.norm(np.stack([trace[f"decoder.{i}.{name}"] for i in range(2)]), axis=-1)

    np.testing.assert_allclose(drawn, norm("hook_attn_out") / norm("hook_resid_post"), rtol=1e-5)


def test_the_tour_page_draws_a_step_of_each_kind(s: Session) -> None:
    trace = s.model.tour(s.text)
    steps = plot.tour_steps(trace)
    firsts = {step.kind: index for index, step in reversed(list(enumerate(steps)))}  # each kind's first step
    at = s.at.switch_page("app_pages/tour.py")
    for kind in ("matrix", "head", "mask", "pattern", "layers", "next token"):
        if kind not in firsts:  # an encoder predicts no next token
            assert kind == "next token" and s.model.facts.kind == "encoder"
            continue
        at.session_state["tour_step"] = firsts[kind]
        at.session_state["tour_head"] = 1
        at.run()
        assert not at.exception, at.exception[0].message if at.exception else ""
        assert_page_drew(at, plot.tour(trace, steps[firsts[kind]].key, head=1, model=s.model))
    if s.model.facts.kind == "encoder":
        assert plot.tour(trace, "output") is None  # words alone
        with pytest.raises(ValueError, match=r"this tour has no step 'next token'; its steps: 'encoder\.tokens'"):
            plot.tour(trace, "next token")
    else:
        with pytest.raises(ValueError, match="reads the model's unembedding: pass model="):
            plot.tour(trace, "next token")
