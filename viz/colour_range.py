"""A heatmap's colour range when a few values dwarf the rest: real models carry massive activations (SmolLM2's first
token's residual norm is about 20,000, a hundred times the others'), which paint everything else one colour. Three
ways to draw: the whole range, a log₁₀ scale (positive values), or the colours stopping below the outliers (values
over FLATTENED times the median size) with a note saying what was left out. Pure: numpy in, the values and range to
draw out (ui/colour_scale.py lets a person choose; attention_atlas.plot takes the choice as an argument)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def scale_choices(values: np.ndarray, signed: bool = False) -> list[str]:
    """The scales offered for `values`: no log scale for signed values or values below 0."""
    return [WHOLE, CLIPPED] if signed or (values < 0).any() else [WHOLE, LOG, CLIPPED]


def opening_scale(values: np.ndarray) -> str:
    """The scale a figure opens on: CLIPPED where its values are flattened, else WHOLE."""
    return CLIPPED if flattened(values) else WHOLE


def scaled(values: np.ndarray, value_name: str, choice: str, signed: bool = False) -> Scale:
    """`values` (rows, cols) drawn on the scale `choice` (WHOLE, LOG or CLIPPED); `signed` values (centred on 0) get
    a symmetric range. CLIPPED leaves values that are not flattened as they are."""
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
