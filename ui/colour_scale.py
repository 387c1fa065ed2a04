"""A heatmap's colour scale when a few values dwarf the rest: real models carry massive activations (SmolLM2's first
token's residual norm is about 20,000, a hundred times the others'), which paint everything else one colour. The
person chooses the whole range, a log₁₀ scale (positive values), or the colours stopping below the outliers (values
over FLATTENED times the median size) with a note saying what was left out; a flattened figure opens on the last
(each figure decides for itself)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

FLATTENED = 10.0  # a value this many times the median |value| (or more) is an outlier; one outlier flattens a figure
WHOLE, LOG, CLIPPED = "whole range", "log₁₀", "outliers left out"


@dataclass(frozen=True)
class Scale:
    """What to draw: the values (log₁₀ of them on a log scale), the colour range, the colour bar's name, a note."""

    values: np.ndarray
    zrange: tuple[float, float] | None
    value_name: str
    note: str | None


def _sizes(values: np.ndarray) -> np.ndarray:
    """The |values| that are finite and not 0 (ReLU's zeros would make the median 0)."""
    size = np.abs(values[np.isfinite(values)])
    return size[size > 0]


def flattened(values: np.ndarray) -> bool:
    """Whether the largest |value| is FLATTENED times the median nonzero |value| or more."""
    size = _sizes(values)
    return size.size > 0 and float(size.max()) >= FLATTENED * float(np.median(size))


def colour_scale(values: np.ndarray, value_name: str, key: str, signed: bool = False) -> Scale:
    """A radio of colour scales over `values` (rows, cols), opening on CLIPPED where they are flattened; `signed`
    values (centred on 0) get a symmetric range and no log scale."""
    choices = [WHOLE, CLIPPED] if signed or (values < 0).any() else [WHOLE, LOG, CLIPPED]
    if st.session_state.get(key) not in choices:
        st.session_state[key] = CLIPPED if flattened(values) else WHOLE
    choice = st.radio("Colour scale", choices, key=key, horizontal=True,
                      help="A few outsized values (often the first token's) can paint the rest one colour.")
    top = float(np.abs(values).max()) or 1.0
    if choice == LOG:
        return Scale(np.log10(np.maximum(values, 1e-12)), None, f"log₁₀ {value_name}", None)
    if choice == WHOLE or not flattened(values):
        return Scale(values, (-top, top) if signed else None, value_name, None)
    size = _sizes(values)
    kept = float(size[size < FLATTENED * np.median(size)].max())  # the largest value that is not an outlier
    outliers = int(np.count_nonzero(np.abs(values) > kept))
    note = (f"The colours stop at {'±' if signed else ''}{kept:.4g}: {outliers} outlying values (over {FLATTENED:g}× "
            f"the median size of those not 0), up to {top:.4g}, are drawn in the end colour. Hover a cell for its "
            "value.")
    return Scale(values, (-kept, kept) if signed else (float(np.nanmin(values)), kept), value_name, note)
