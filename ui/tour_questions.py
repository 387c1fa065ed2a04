"""The Tour's "predict, then reveal" (off unless chosen): before a step's figure, a question the figure answers ("which
token will this one attend to most?", "which token comes next?"), a guess among the choices, and the figure only once
Reveal is pressed, with the right answer marked and the guess told right or not."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attention_atlas.ui.messages import literal

REVEALED = "_tour_revealed"  # session key: the questions revealed, each by what was asked
ASKED = "_tour_guess_asked"  # session key: the question the guess box answers (a new question empties it)
MARK = "#d62728"


def predicting() -> bool:
    return bool(st.session_state.get("tour_predict"))


def ask(words: DeltaGenerator, question: str, choices: list[str], asked: tuple) -> tuple[bool, int | None]:
    """The question (plain text: `literal` is applied here), a guess among `choices` and Reveal, under the step's
    words; whether this question (`asked`: what identifies it) is revealed, and the guess's index (None: none)."""
    if st.session_state.get(ASKED) != asked:
        st.session_state.pop("tour_guess", None)
        st.session_state[ASKED] = asked
    revealed: set = st.session_state.setdefault(REVEALED, set())
    words.markdown(f"**Predict first.** {literal(question)}")
    guess = words.selectbox("Your answer", range(len(choices)), format_func=choices.__getitem__, index=None,
                            key="tour_guess", placeholder="Choose one, then reveal")
    if asked not in revealed:
        words.button("Reveal", key="tour_reveal", on_click=revealed.add, args=(asked,), disabled=guess is None,
                     type="primary")
    return asked in revealed, guess


def verdict(guess: int | None, right: int, choices: list[str]) -> str:
    """What the reveal says of the guess."""
    answer = f"The answer: {choices[right]}."
    if guess is None:
        return answer
    return answer + (" You had it." if guess == right else f" You chose {choices[guess]}.")


def mark_cell(figure: go.Figure, row: int, column: int) -> go.Figure:
    """A heatmap with cell (row, column) (category positions) outlined."""
    figure.add_shape(type="rect", x0=column - 0.5, x1=column + 0.5, y0=row - 0.5, y1=row + 0.5,
                     line={"color": MARK, "width": 3})
    return figure


def mark_bar(figure: go.Figure, index: int) -> go.Figure:
    """Bars with bar `index` coloured as the answer."""
    bars = figure.data[0]
    figure.update_traces(marker_color=[MARK if i == index else "#9aa5b1" for i in range(len(bars.x))])
    return figure
