"""A heatmap's colour scale, chosen by the person when a few values dwarf the rest (viz/colour_range.py): the whole
range, a log₁₀ scale (positive values), or the colours stopping below the outliers; a flattened figure opens on the
last (each figure decides for itself)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attention_atlas.viz.colour_range import Scale, opening_scale, scale_choices, scaled


def choose_scale(values: np.ndarray, key: str, signed: bool = False) -> str:
    """A radio of colour scales over `values` (rows, cols), opening on the one `opening_scale` picks."""
    choices = scale_choices(values, signed)
    if st.session_state.get(key) not in choices:
        st.session_state[key] = opening_scale(values)
    return st.radio("Colour scale", choices, key=key, horizontal=True,
                    help="A few outsized values (often the first token's) can paint the rest one colour.")


def colour_scale(values: np.ndarray, value_name: str, key: str, signed: bool = False) -> Scale:
    """The radio of `choose_scale`, and `values` drawn on the chosen scale; `signed` values (centred on 0) get a
    symmetric range and no log scale."""
    return scaled(values, value_name, choose_scale(values, key, signed), signed)
