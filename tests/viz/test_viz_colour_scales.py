"""Every colour scale and palette the figures use stays readable with red-green colour blindness. Colours are simulated
as a protanope and a deuteranope see them (Machado, Oliveira and Fernandes 2009, full severity, in linear RGB) and
compared in CIELAB: a sequential scale's lightness must keep rising (or falling) step by step, a diverging scale's two
sides must stay apart at equal distances from its middle, and a palette's colours must stay apart pair by pair. The
scales the code names are found by reading its source, so a new one cannot slip past."""

from __future__ import annotations

import ast
import itertools
import tomllib
from pathlib import Path

import numpy as np
import plotly.colors
import pytest

from attention_atlas.viz.colours import CATEGORICAL, OKABE_ITO
from attention_atlas.viz.masks import REASON_RGB, VISIBLE_RGB

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("viz", "ui", "app_pages")  # every figure is built or drawn there
SEQUENTIAL = ("Viridis", "Cividis", "Magma", "Blues", "Greys", "Reds", "Oranges")
DIVERGING = ("RdBu", "RdBu_r")
VISION = {  # linear RGB -> linear RGB as seen
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
}
STEP_L = 2.0  # CIELAB lightness between neighbouring samples of a sequential scale (of 11), at least
SIDES_APART = 30.0  # ΔE*ab between a diverging scale's two sides at equal distances from its middle, at least
PAIR_APART = 10.0  # ΔE*ab between any two colours of a palette, at least


def seen(rgb: np.ndarray, vision: str) -> np.ndarray:
    """(n, 3) sRGB 0..255 -> (n, 3) CIELAB (D65) of the colours as `vision` sees them."""
    c = np.asarray(rgb, dtype=np.float64) / 255
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4) @ VISION[vision].T
    xyz = np.clip(linear, 0, 1) @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                                            [0.0193, 0.1192, 0.9505]]).T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


def samples(scale: str, n: int = 11) -> np.ndarray:
    """(n, 3) sRGB 0..255 along plotly's named scale."""
    colours = plotly.colors.sample_colorscale(plotly.colors.get_colorscale(scale), np.linspace(0, 1, n),
                                              colortype="tuple")
    return np.array(colours) * 255


def rgb(colours) -> np.ndarray:
    """Hex or "rgb(r, g, b)" strings -> (n, 3) sRGB 0..255."""
    return np.array([plotly.colors.hex_to_rgb(c) if c.startswith("#") else plotly.colors.unlabel_rgb(c)
                     for c in colours], dtype=np.float64)


def monotonic(lightness: np.ndarray) -> bool:
    steps = np.diff(lightness)
    return bool((steps >= STEP_L).all() or (steps <= -STEP_L).all())


def sequential_ok(scale: str) -> bool:
    return all(monotonic(seen(samples(scale), vision)[:, 0]) for vision in VISION)


def diverging_ok(scale: str) -> bool:
    """Each half runs one way in lightness towards the middle, and the sides stay apart."""
    for vision in VISION:
        lab = seen(samples(scale), vision)  # (11, 3): sample 5 is the middle
        if not (monotonic(lab[:6, 0]) and monotonic(lab[5:, 0])):
            return False
        if min(np.linalg.norm(lab[i] - lab[-1 - i]) for i in range(4)) < SIDES_APART:
            return False
    return True


def palette_apart(colours) -> float:
    """The smallest ΔE*ab between two of `colours`, as the least well-seeing of the visions sees them."""
    return min(float(np.linalg.norm(a - b)) for vision in VISION
               for a, b in itertools.combinations(seen(rgb(colours), vision), 2))


def named_scales() -> dict[str, set[str]]:
    """Every plotly colour scale or Vega scheme the code names, and where: `colorscale=`/`scheme=` arguments, the
    "colorscale" of a trace written as a dict, colorscale parameters' defaults, and lists assigned to a name ending
    in SCALES."""
    found: dict[str, set[str]] = {}
    for path in sorted(p for folder in SOURCES for p in (ROOT / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[ast.expr] = []
            if isinstance(node, ast.keyword) and node.arg in ("colorscale", "scheme", "color_continuous_scale"):
                names = [node.value]
            elif isinstance(node, ast.Dict):  # a trace written as a dict (it has a "z"; ui/url_state's has none)
                keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
                names = [keys["colorscale"]] if "colorscale" in keys and "z" in keys else []
            elif isinstance(node, ast.arguments):
                arguments = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
                names = [d for a, d in zip(arguments, node.defaults, strict=True) if a.arg == "colorscale"]
                names += [d for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                          if a.arg == "colorscale" and d is not None]
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("SCALES")
                                                      for t in node.targets):
                names = list(getattr(node.value, "elts", []))
            for name in names:
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    found.setdefault(name.value, set()).add(f"{path.relative_to(ROOT)}:{name.lineno}")
    return found


def test_every_named_scale_is_one_that_stays_readable() -> None:
    found = named_scales()
    assert {"Viridis", "RdBu_r", "Magma", "Cividis"} <= set(found)  # the reading finds them (the attention picker's)
    strays = {scale: where for scale, where in found.items() if scale not in (*SEQUENTIAL, *DIVERGING)}
    assert strays == {}


@pytest.mark.parametrize("scale", SEQUENTIAL)
def test_sequential_scales_keep_their_order(scale: str) -> None:
    assert sequential_ok(scale)


@pytest.mark.parametrize("scale", DIVERGING)
def test_diverging_scales_keep_their_sides_apart(scale: str) -> None:
    assert diverging_ok(scale)


@pytest.mark.parametrize("scale", ["RdYlGn", "Picnic", "Jet"])
def test_red_green_and_rainbow_scales_are_refused(scale: str) -> None:
    assert not diverging_ok(scale) and not sequential_ok(scale)


def test_the_palettes_stay_apart() -> None:
    theme = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["theme"]
    palettes = {
        "masks": [VISIBLE_RGB, *REASON_RGB.values()],
        "lines": CATEGORICAL,
        "Okabe and Ito": [c for name, c in OKABE_ITO.items() if name != "black"],  # black: as far as can be
        "theme, light": theme["light"]["chartCategoricalColors"],
        "theme, dark": theme["dark"]["chartCategoricalColors"],
    }
    assert {name: round(palette_apart(colours), 1) for name, colours in palettes.items()
            if palette_apart(colours) < PAIR_APART} == {}


def test_the_masks_red_and_green_of_before_were_too_close() -> None:
    assert palette_apart(["rgb(214, 39, 40)", "rgb(44, 160, 44)"]) < PAIR_APART  # the causal and window tints
    streamlit_default = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1", "#ff8700", "#ffd16a"]
    assert palette_apart(streamlit_default) < PAIR_APART
