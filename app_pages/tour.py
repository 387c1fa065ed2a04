"""Tour: the whole forward pass of the model in use, one step a screen, on the sidebar's text: tokens, embeddings,
positions, the first block in detail (queries, keys and values, scores, mask, softmax, weighted values, W_O, the
residual and its norm, the feed-forward network), the other blocks together, and the next token. The steps, their
words and the value each draws come from model/inspect/tour.py; Back and Next walk them, and the step is in the URL."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import likeliest
from attention_atlas.model.inspect.tour import Step, shape_label, step_shape, tour_options, tour_steps
from attention_atlas.plot.tour import (
    FIGURE_KINDS,
    NEXT_TOKENS,
    StepFigure,
    next_token_figure,
    step_figure,
    tokens_table,
)
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import constant, csv_fits, downloads, figure_label, file_name
from attention_atlas.ui.messages import literal, show_error
from attention_atlas.ui.page import current_runner, current_trace, trace_with
from attention_atlas.ui.pickers import keep_valid
from attention_atlas.ui.role_views import roles_of
from attention_atlas.ui.tour_questions import ask, mark_bar, mark_cell, predicting, verdict
from attention_atlas.viz.step_through import LIMIT
from attention_atlas.viz.tokens import visible_token
from attention_atlas.viz.tour import tour_diagram

PRESENTER_STYLE = ("<style>[data-testid='stSidebar'], [data-testid='stSidebarCollapsedControl'] { display: none; } "
                   "[data-testid='stMain'] p, [data-testid='stMain'] li { font-size: 1.3rem; } "
                   "[data-testid='stMain'] h3 { font-size: 2.1rem; }</style>")  # constant: no user text
PRESENTER_FONT = 17  # px, the figures' text in presenter mode (plotly's default: 12)
PRESENTER_HEIGHT = 480  # px at least: a figure fills the screen's lower part at 1280 x 720


def draw(drawn: DeltaGenerator, figure: go.Figure, name: str, table: Callable[[], pd.DataFrame]) -> None:
    """The step's figure, its text larger in presenter mode, and its downloads (`table` makes the values drawn, whole
    where a CSV holds them, when the CSV button is pressed)."""
    if st.session_state.get("tour_present"):
        figure.update_layout(font={"size": PRESENTER_FONT}, title_font_size=PRESENTER_FONT + 3,
                             height=max(figure.layout.height or 0, PRESENTER_HEIGHT))
    drawn.plotly_chart(figure, key="tour_figure", alt=figure_label(figure, csv=True))
    with drawn:
        downloads(figure, name, "tour_figure_files", table)


def table_of(value: np.ndarray, rows: list[str], columns: list[str]) -> pd.DataFrame:
    """A (rows, columns) matrix as a table: whole where a CSV holds it, else its first LIMIT rows and columns."""
    if not csv_fits(*value.shape):
        value, rows, columns = value[:LIMIT, :LIMIT], rows[:LIMIT], columns[:LIMIT]
    return pd.DataFrame(value, index=rows, columns=columns)


def walk(steps: list[Step], by: int) -> None:
    """Back (-1) or Next (+1): a button's callback, before the step picker is drawn."""
    st.session_state["tour_step"] = min(max(st.session_state.get("tour_step", 0) + by, 0), len(steps) - 1)


def jump(markers: int) -> None:
    """The diagram's callback: the clicked step becomes the one shown."""
    event = st.session_state.get("tour_diagram")
    points = [point for point in event.selection.points if point.get("curve_number") == markers] if event else []
    if points:
        st.session_state["tour_step"] = points[0]["point_index"]


def show_diagram(trace: Trace, steps: list[Step], index: int, where: DeltaGenerator) -> None:
    """Every step of this model's pass as a diagram (viz/tour.py): each step's live shape, the current step lit, an
    encoder-decoder's encoder output drawn into its cross-attention; a click on a step jumps there."""
    pair = trace.facts.kind == "encoder-decoder"
    labels = [f"{step.stack} · {step.label}" if pair and (i == 0 or step.stack != steps[i - 1].stack) and step.stack
              else step.label for i, step in enumerate(steps)]
    shapes = [" × ".join(f"{size:,}" for size in step_shape(trace, step)[1]) for step in steps]
    keys = [step.key for step in steps]
    joins = [(max(i for i, step in enumerate(steps) if step.stack == "encoder"), keys.index("decoder.cross"))] \
        if pair else []
    figure = tour_diagram(labels, shapes, index, joins)
    where.plotly_chart(figure, key="tour_diagram", on_select=partial(jump, len(figure.data) - 1),
                       selection_mode="points", config={"displayModeBar": False},
                       alt=figure_label(figure, csv=False, about=f"The forward pass in {len(steps)} steps, step "
                                        f"{index + 1} lit: click a step to open it"))
    with where:
        downloads(figure, file_name(trace.facts.model_id, "tour", "diagram"), "tour_diagram_files")


def choose_step(steps: list[Step]) -> int:
    """The step shown: picked, or walked to with Back and Next."""
    indices = list(range(len(steps)))
    keep_valid("tour_step", indices)
    picker, back, forward, present, predict = st.columns([4, 1, 1, 1.7, 1.6], vertical_alignment="bottom")
    index = st.session_state.get("tour_step", 0)
    back.button("Back", key="tour_back", on_click=walk, args=(steps, -1), disabled=index == 0, width="stretch",
                shortcut="Left", help="Or the left arrow key.")
    forward.button("Next", key="tour_next", on_click=walk, args=(steps, 1), disabled=index == len(steps) - 1,
                   type="primary", width="stretch", shortcut="Right", help="Or the right arrow key.")
    presenting = present.toggle("Present", key="tour_present", help="For a projector: the sidebar hidden, "
                                "larger text and figures. Turn it off to change the model or the text.")
    asking = predict.toggle("Predict", key="tour_predict", help="Before a step's figure, a question it answers: "
                            "guess, then reveal.")
    url_state.write(present=presenting or None, predict=asking or None)
    if presenting:
        st.html(PRESENTER_STYLE)
    index = picker.selectbox("Step", indices, key="tour_step", format_func=lambda i: f"{i + 1}. {steps[i].title}")
    url_state.write(step=index)
    return index


def choose_head(trace: Trace, words: DeltaGenerator) -> int:
    """The head of the first block whose numbers the steps show, each named by its role (ui/role_views.py)."""
    heads = list(range(trace.facts.n_heads))
    keep_valid("tour_head", heads)
    shown = current_trace()  # the run of every layer (the Tour's own records its first block's)
    site = next(s for s in shown.sites() if not Site.of(s).is_cross)
    roles = roles_of(shown, site)
    first = roles[roles["layer"] == 0].set_index("head")["role"]
    labels = {head: f"{head} · {first[head]}" for head in heads}  # not a function of `trace`: the session keeps it
    head = words.selectbox("Head", heads, key="tour_head", format_func=labels.get, help="The head whose numbers "
                           "this step shows (of the first block), named by what it does; the others compute the "
                           "same way with their own weights.")
    url_state.write(tour_head=head)
    return head


def show_step(trace: Trace, step: Step, words: DeltaGenerator, drawn: DeltaGenerator) -> None:
    """The step's shape line (and head picker) under its words, its figure beside them."""
    if step.kind == "tokens":
        table = tokens_table(trace, step)
        words.caption(shape_label(("tokens",), (len(table),)))
        drawn.dataframe(table)
        return
    if step.kind == "next token":
        show_next_token(trace, words, drawn)
        return
    if step.kind not in FIGURE_KINDS:
        return
    head = choose_head(trace, words) if step.kind in ("head", "mask", "pattern") else None
    shown = step_figure(trace, step, head or 0)
    words.caption(shown.shape)
    figure = shown.figure
    if step.kind == "pattern" and predicting():
        figure = predicted_pattern(trace, step, head, shown, words, drawn)
        if figure is None:
            return
    draw(drawn, figure, file_name(trace.facts.model_id, "tour", step.key, *(() if head is None else (head,))),
         partial(table_of, shown.value, shown.rows, shown.columns))
    if shown.note and not csv_fits(*shown.value.shape):
        drawn.caption(shown.note.split(";")[0] + ".")
    elif shown.note:
        drawn.caption(shown.note)


def predicted_pattern(trace: Trace, step: Step, head: int, shown: StepFigure, words: DeltaGenerator,
                      drawn: DeltaGenerator) -> go.Figure | None:
    """Before the pattern, the question where its last row drawn looks most; once revealed, the verdict and the
    pattern with the answer outlined (None until then)."""
    allowed = trace.masks[step.site]  # (queries, keys)
    queries, keys, pattern = shown.rows, shown.columns, shown.value
    row = min(len(queries), LIMIT) - 1  # the last row drawn
    seen = np.flatnonzero(allowed[row])
    choices, right = [keys[j] for j in seen], int(np.argmax(pattern[row, seen]))
    revealed, guess = ask(words, f"In head {head}, which token will {queries[row]} attend to most?", choices,
                          (trace.facts.model_id, trace.text, step.key, head))
    if not revealed:
        drawn.info("Guess, then reveal: the pattern shows where it looks.", icon=":material/help:")
        return None
    words.markdown(literal(verdict(guess, right, choices)) + f" ({pattern[row, seen[right]]:.0%})")
    return mark_cell(shown.figure, row, int(seen[right]))


def show_next_token(trace: Trace, words: DeltaGenerator, drawn: DeltaGenerator) -> None:
    runner = current_runner()
    try:
        found = likeliest(runner, trace, -1, NEXT_TOKENS)  # one vector through the unembedding: not worth a cache
    except UserError as error:
        show_error(str(error))
        return
    decoder = trace.target_tokens if trace.facts.kind == "encoder-decoder" else trace.tokens
    words.caption(shape_label(("vocabulary",), (trace.facts.vocab_size,)) + f": the {NEXT_TOKENS} likeliest shown")
    texts, probabilities = zip(*found, strict=True)
    figure = next_token_figure(trace, found)
    if predicting():
        order = sorted(range(len(texts)), key=texts.__getitem__)  # alphabetical: the order gives nothing away
        choices = [repr(visible_token(texts[i])) for i in order]
        revealed, guess = ask(words, f"Which token comes next, after {visible_token(decoder[-1])!r}?", choices,
                              (trace.facts.model_id, trace.text, "next token"))
        if not revealed:
            drawn.info("Guess, then reveal: the model's probabilities for the next token.", icon=":material/help:")
            return
        words.markdown(literal(verdict(guess, order.index(0), choices)))
        figure = mark_bar(figure, 0)
    draw(drawn, figure, file_name(trace.facts.model_id, "tour", "next token"),
         constant(pd.DataFrame({"token": texts, "probability": probabilities})))
    words.markdown(f"The output: **{literal(repr(visible_token(texts[0])))}**, {probabilities[0]:.1%}.")


def page() -> None:
    st.header("Tour")
    st.caption("The whole forward pass of the model in use, step by step, on the text in the sidebar: every "
               "figure is this run's own numbers. Back and Next walk it; the step is in the link.")
    shown = current_trace()
    trace = trace_with(tour_options(shown.facts).hooks)
    steps = tour_steps(trace)
    index = choose_step(steps)
    step = steps[index]
    diagram, words, drawn = st.columns([1.5, 2, 3], gap="medium")
    show_diagram(trace, steps, index, diagram)
    words.subheader(step.title)
    words.markdown(step.text)
    show_step(trace, step, words, drawn)


page()
