"""Colours told apart with red-green colour blindness too: Okabe and Ito's palette (Color Universal Design, 2008),
for categories that have no order. tests/viz/test_viz_colour_scales.py checks every colour scale and palette the
figures use, simulated for protanopia and deuteranopia."""

from __future__ import annotations

OKABE_ITO = {"orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7", "black": "#000000"}
# lines of a chart, in order (a series past the sixth takes the first colour again): neither black nor yellow, each of
# which vanishes on one of the two themes' backgrounds
CATEGORICAL = tuple(OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion", "reddish purple",
                                                 "sky blue"))
