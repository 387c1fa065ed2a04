"""Hostile links: every parameter ui/url_state.py reads, with odd Unicode, huge and signed numbers, floats, NaN and
infinity spelled out, and markup. The link's choices go into the widgets' state (`restore_once`, called with a stand-in
for Streamlit's query parameters and state: hundreds of links a second) without an exception, and a value that does
not fit its parameter is dropped; a few links open the app itself (AppTest: about a second each), whose pages show no
exception and write back only choices that exist."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

from hypothesis import example, given
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from attention_atlas.model.registry import list_model_ids
from attention_atlas.ui import url_state
from tests.fuzz.outcomes import counter, examples, is_sentence, within_limit
from tests.hostile import assert_safe

CUSTOM = "custom"
HEAD = {"site": ("encoder.attn", "decoder.attn", "decoder.cross_attn"), "layer": (0, 1), "head": (0, 1, 2, 3)}
CAUSAL_LABELS = {"auto": "as trained", "on": "on everywhere", "off": "off everywhere"}  # as app.py passes them
NAMES = ("model", "text", "tz", "target", "causal", "view", *url_state.FLAGS, *url_state.NUMBERS, *url_state.DECIMALS,
         *url_state.CHOICES, *url_state.TEXTS)
ODD_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)  # every category: controls, RTL, combining marks
NUMBER_LIKE = st.one_of(st.integers(-10**40, 10**40).map(str), st.floats().map(str),
                        st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "0x10", "1_0", " 1", "1 ", "+1",
                                         "²", "١٢", "１２", "9" * 5000, "0" * 30 + "1", "1.5", "-0", "", "٣.٥"]))
MARKUP = st.sampled_from(["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))",
                          "**bold**", "$x$", "{}", "%00", "\u202egnp.exe", "a\u0000b", "\ud800"])
VALUES = st.one_of(ODD_TEXT, NUMBER_LIKE, MARKUP, st.sampled_from(["0", "1", "greedy", "sample", "auto", "off"]))
PACKED = st.tuples(ODD_TEXT, st.integers(30, 3000)).map(lambda drawn: url_state.pack_text(drawn[0] * drawn[1])["tz"]
                                                                  or "")  # long enough to be packed
TZ = st.one_of(VALUES, PACKED, st.tuples(PACKED, st.integers(0, 200)).map(lambda drawn: drawn[0][: drawn[1]]))
RESTORED: Counter[str] = counter("test_fuzz_links: restore_once")
OPENED: Counter[str] = counter("test_fuzz_links: the Attention page (AppTest)")
LINKS = st.dictionaries(st.sampled_from(NAMES), VALUES, min_size=1, max_size=len(NAMES)) | st.fixed_dictionaries(
    {"tz": TZ})


def _restored(params: dict[str, str]) -> dict[str, object]:
    """The widgets' state after a session's first run on a link with `params`."""
    state: dict[str, object] = {}
    real = url_state.st
    url_state.st = SimpleNamespace(query_params=SimpleNamespace(to_dict=lambda: dict(params)), session_state=state)
    try:
        url_state.restore_once([*list_model_ids()], CUSTOM, CAUSAL_LABELS)
    finally:
        url_state.st = real
    return state


def _kept(params: dict[str, str], state: dict[str, object]) -> list[str]:
    """The parameters whose value reached the state; each checked to fit it (the others were dropped)."""
    kept = []
    for name, key in url_state.NUMBERS.items():
        if key in state:
            assert type(state[key]) is int and str(state[key]) == params[name].lstrip("0").rjust(1, "0"), name
            kept.append(name)
    for name, key in url_state.DECIMALS.items():
        if key in state:
            assert isinstance(state[key], float) and math.isfinite(state[key]), name
            kept.append(name)
    for name, (key, allowed) in url_state.CHOICES.items():
        if key in state:
            assert state[key] in allowed, name
            kept.append(name)
    for name, key in url_state.FLAGS.items():
        if key in state:
            assert state[key] is (params[name] == "1") and params[name] in ("0", "1"), name
            kept.append(name)
    if "causal" in params and "causal" in state:
        assert state["causal"] in CAUSAL_LABELS.values()
        kept.append("causal")
    if "text" in state:
        assert len(state["text"]) <= url_state.MAX_TEXT_CHARS
        kept.append("tz" if "tz" in params else "text")
    if "text_note" in state:
        assert is_sentence(state["text_note"])
    if "model_id" in state:
        assert state["model_id"] in [*list_model_ids(), CUSTOM]
        kept.append("model")
    return kept


@given(LINKS)
@example({"layer": "²"})  # a digit int() does not read
@example({"head": "9" * 5000})  # past int()'s 4,300 digits
@example({"seed": "١٢"})  # Arabic-Indic digits: not a number a link writes
@examples(400)
def test_a_hostile_link_restores_only_values_that_fit(params: dict[str, str]) -> None:
    with within_limit(lambda: repr(params)[:200]):
        state = _restored(params)
    kept = _kept(params, state)
    RESTORED["links"] += 1
    RESTORED["values kept"] += len(kept)
    left = [name for name in params if name in url_state.TEXTS or name in ("target", "view")]  # the widgets check
    RESTORED["values dropped"] += len(params) - len(kept) - len(left)
    RESTORED["values left to the widgets"] += len(left)


AS_SENT = VALUES.map(lambda value: value.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))  # as a browser
# sends a link: a lone surrogate (%ED%A0%80) arrives as U+FFFD


@given(st.dictionaries(st.sampled_from(["layer", "head", "site", "row", "col", "view", "colorscale", "causal", "text",
                                        "step", "tour_head"]), AS_SENT, min_size=2, max_size=6))
@examples(12)
def test_a_hostile_link_opens_the_attention_page(params: dict[str, str]) -> None:
    """The app on toy-copy through the link, then its Attention page: no exception, no traceback shown, a text
    toy-copy cannot read replaced by its example with a note saying so, and the site, layer and head pickers on
    choices toy-copy has."""
    at = AppTest.from_file("../../app.py", default_timeout=60)
    at.query_params.update({"model": "toy-copy"} | params)
    at.run()
    assert_safe(at)
    noted = any("cannot read the text you had" in info.value for info in at.info)
    at.switch_page("app_pages/attention.py").run()
    assert_safe(at)
    pickers = {widget.key: widget.value for kind in ("radio", "selectbox") for widget in getattr(at, kind)
               if widget.key in HEAD}
    assert pickers.keys() == HEAD.keys() and all(pickers[key] in HEAD[key] for key in HEAD), pickers
    OPENED["the link's text refused: opened on the example, with a note" if noted else
           "opened on the link's text" if "text" in params else "opened on the example (no text in the link)"] += 1
