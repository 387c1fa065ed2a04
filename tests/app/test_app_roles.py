"""Heads named by what they do, on the pages: toy-induction reading a text said twice opens the Overview on its
induction head, saying so with the head's own share, and the Attention page's model view colours every head by the
role `Trace.head_roles` names."""

from __future__ import annotations

import numpy as np

import attention_atlas as aa
from attention_atlas.viz.outputs import percent
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart

TEXT = "qwertyuiop"  # toy-induction's tokenizer reads it, then its repeat: an induction head's text


def test_the_overview_opens_on_the_induction_head() -> None:
    roles = aa.load("toy-induction").run(TEXT).head_roles()
    induction = roles[roles["role"] == "induction"]
    best = induction.loc[induction["induction"].idxmax()]
    at = open_app_page("app_pages/overview.py", "toy-induction", TEXT)
    assert_ok(at, "overview")
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (best["layer"], best["head"]) == (1, 2)
    caption = next(c.value for c in at.caption if "induction head" in c.value)
    assert caption.startswith(f"Layer 1 · head 2 is an *induction head*: where a token occurred before, it puts "
                              f"{percent(best['induction'])} of its attention")


def test_the_model_view_colours_every_head_by_its_role() -> None:
    trace = aa.load("toy-induction").run(TEXT)
    roles = trace.head_roles()
    at = open_app_page("app_pages/attention.py", "toy-induction", TEXT)
    assert_ok(at, "model view")
    grid = chart(at, "every head by its role")
    hover = np.array(grid["data"][0]["customdata"]).reshape(-1)  # "role<br>measure: share", layer by layer
    assert [text.split("<br>")[0] for text in hover] == roles["role"].tolist()
    legend = [trace_["name"] for trace_ in grid["data"][2:]]
    assert "induction" in legend and set(legend) == set(roles["role"])
    assert any("induction" in c.value and "click it to open it" in c.value for c in at.caption)


def test_the_tours_heads_are_named_by_their_roles() -> None:
    roles = aa.load("toy-induction").run(TEXT).head_roles()
    first = roles[roles["layer"] == 0].set_index("head")["role"]
    at = open_app_page("app_pages/tour.py", "toy-induction", TEXT, params={"step": "6"})
    assert_ok(at, "tour")
    picker = at.selectbox(key="tour_head")
    assert picker.options == [f"{head} · {role}" for head, role in first.items()]
