"""Every page audited with axe-core (WCAG 2.1 A and AA rules) in the light theme and in the dark one: no serious or
critical violation (contrast, keyboard reach of scrollable regions, names of controls …); the text of the figures
(which axe does not read: SVG) at 4.5:1 against the page; and every figure labelled for a screen reader, a figure
whose label promises its CSV having that download under it. One browser tab, every page opened once by its link in
the navigation, each audited in both themes (the browser's colour scheme switched in place: Streamlit follows it
without a rerun). axe-core is the copy that axe-playwright-python bundles."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from app_browser.page import open_page
from attention_atlas.ui.downloads import CSV_SAID, UNNAMED
from attention_atlas.ui.page import PAGES

RULES = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
         "resultTypes": ["violations"]}
BLOCKING = ("serious", "critical")
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(23, 22, 20)"}  # the themes' page backgrounds
THEMED = "bg => getComputedStyle(document.querySelector('[data-testid=\"stApp\"]')).backgroundColor === bg"
CONTRAST = 4.5  # WCAG AA, normal text
# The figures' own text on the page's background (tick labels, axis and colour bar titles, titles, legends, a scatter's
# text; not a heatmap's numbers, drawn on their cells): [text, its fill, its contrast] where under CONTRAST.
FIGURE_TEXT = """contrast => {
  const luminance = colour => {
    const [r, g, b] = colour.match(/[\\d.]+/g).slice(0, 3).map(v => v / 255)
      .map(c => c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const page = luminance(getComputedStyle(document.querySelector('[data-testid="stApp"]')).backgroundColor);
  const low = [];
  for (const t of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot :is(g[class$="tick"] > text, '
      + 'text.xtitle, text.ytitle, text.gtitle, text.legendtext, .cbtitle text, .scatterlayer .textpoint > text)')) {
    const fill = getComputedStyle(t).fill, text = luminance(fill);
    const ratio = (Math.max(text, page) + 0.05) / (Math.min(text, page) + 0.05);
    if (t.textContent.trim() && ratio < contrast) low.push([t.textContent.slice(0, 40), fill, ratio.toFixed(2)]);
  }
  return low.slice(0, 5);
}"""
# Each drawn figure's label, and whether a CSV download follows it before the next figure (document order).
FIGURES = """() => {
  const found = [];
  for (const e of document.querySelectorAll(
      '[data-testid="stMain"] [data-testid="stPlotlyChart"], [data-testid="stMain"] [data-testid="stVegaLiteChart"],'
      + ' [data-testid="stMain"] [data-testid="stDownloadButton"] button')) {
    if (e.tagName === "BUTTON") {
      if (found.length && e.textContent.trim().endsWith("CSV")) found[found.length - 1].csv = true;
    } else found.push({label: e.getAttribute("aria-label"), csv: false});
  }
  return found;
}"""


def audit(page, axe: Axe) -> list[str]:
    """The serious and critical violations on the page as it is: "rule (impact): n elements, e.g. <html>"."""
    violations = axe.run(page, options=RULES).response["violations"]
    return [f"{v['id']} ({v['impact']}): {len(v['nodes'])} elements, e.g. {v['nodes'][0]['html'][:160]}"
            for v in violations if v["impact"] in BLOCKING]


def unlabelled(page) -> list[str]:
    """Figures without a label of their own, or whose label promises a CSV download that does not follow them."""
    return [f"{figure['label']!r} (CSV {'drawn' if figure['csv'] else 'missing'})" for figure in page.evaluate(FIGURES)
            if not figure["label"] or figure["label"] == f"{UNNAMED}." or
            (CSV_SAID in figure["label"]) != figure["csv"]]


@pytest.mark.opens(model="toy-date", text="may 1 2000")
def test_every_page_passes_axe_core_in_light_and_dark(page) -> None:
    axe = Axe()
    found: dict[str, list] = {}
    for index, shown in enumerate(PAGES):
        if index:
            open_page(page, shown.title)
        expect(page.get_by_test_id("stSidebarNavLink").filter(has_text=shown.title)).to_have_attribute(
            "aria-current", "page")
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_function(THEMED, arg=BACKGROUND[scheme])
            found[f"{shown.title}, {scheme}"] = audit(page, axe)
            found[f"{shown.title}, {scheme}: figures' text"] = page.evaluate(FIGURE_TEXT, CONTRAST)
        found[f"{shown.title}: figures' labels"] = unlabelled(page)
        page.emulate_media(color_scheme="light")
    assert {where: problems for where, problems in found.items() if problems} == {}
    assert page.console_errors == []
