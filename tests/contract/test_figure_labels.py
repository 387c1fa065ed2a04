"""Every figure the pages draw carries a label a screen reader reads (`alt` of st.plotly_chart and st.altair_chart,
made by `ui.downloads.figure_label`), and that label says "CSV" exactly where the figure's downloads have a table.
Read from the source: a figure drawn in a state no test opens is held to it too."""

from __future__ import annotations

import ast
from pathlib import Path

import altair as alt
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.ui.downloads import CSV_SAID, UNNAMED, figure_label

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ("plotly_chart", "altair_chart")


def unlabelled() -> list[str]:
    """file:line of each chart call without `alt=figure_label(...)`, or whose `csv=` differs from whether the
    `downloads` call for the same figure (in the same function) passes a table."""
    found = []
    for path in sorted([*(ROOT / "ui").glob("*.py"), *(ROOT / "app_pages").glob("*.py")]):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            tables = {call.args[0].id: len(call.args) >= 4 or any(k.arg == "table" for k in call.keywords)
                      for call in ast.walk(function) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                      and call.func.id == "downloads" and call.args and isinstance(call.args[0], ast.Name)}
            for call in ast.walk(function):
                chart = isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in CHARTS
                if not chart:
                    continue
                label = next((k.value for k in call.keywords if k.arg == "alt"), None)
                csv = next((k.value.value for k in getattr(label, "keywords", []) if k.arg == "csv"), None)
                shown = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
                if not (isinstance(label, ast.Call) and getattr(label.func, "id", "") == "figure_label") or \
                        csv is not tables.get(shown, False):
                    found.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    return found


def test_every_chart_is_labelled_and_says_csv_where_it_has_one() -> None:
    assert unlabelled() == []


def test_a_label_reads_the_title_as_typed() -> None:
    heatmap = go.Figure(layout={"title": {"text": "A &lt;b&gt; &amp;amp; B<br>layer 1"}})  # as viz.tokens writes it
    assert figure_label(heatmap, csv=True) == f"A <b> &amp; B layer 1. {CSV_SAID}"
    chart = alt.layer(alt.Chart(pd.DataFrame({"x": [1]}), title="loss").mark_line())
    assert figure_label(chart, csv=False) == "loss."
    assert figure_label(go.Figure(), csv=False, about="Every head") == "Every head."
    assert figure_label(go.Figure(), csv=False) == f"{UNNAMED}."
