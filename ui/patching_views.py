"""The Attribution page's activation patching: a corrupted text (offered, or typed), the kinds to patch, a button that
patches with a progress bar and a stop that keeps what is done, and the result as layer x position and layer x head
grids (model/inspect/patching.py)."""

from __future__ import annotations

import random
import re

import pandas as pd
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.inspect.patching import KINDS, Patching, patching_steps
from attention_atlas.ui.downloads import constant, downloads, file_name
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.runs import readable_failures
from attention_atlas.viz.attribution import head_shares_heatmap, patching_heatmap

KIND_LABELS = {"resid_pre": "the residual stream into each layer", "attn_out": "each attention output",
               "mlp_out": "each MLP output", "head_out": "each head's output (every position)"}
RESULT = "_attribution_patching"  # session key: (what was patched, Patching so far)


def corruptions(text: str, answer: str, wrong: str) -> dict[str, str]:
    """Corrupted texts to offer: the answer's and the wrong answer's words swapped, each number changed, the words
    shuffled (seeded: the same text every time)."""
    a, b = answer.strip(), wrong.strip()
    offered: dict[str, str] = {}
    if a and b and a != b and (a in text or b in text):
        offered[f"{a} and {b} swapped"] = re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b",
                                                lambda m: b if m.group(0) == a else a, text)
    if re.search(r"\d", text):
        offered["another number"] = re.sub(r"\d", lambda m: str((int(m.group(0)) + 1) % 10), text)
    words = text.split()
    if len(words) > 2:
        shuffled = words[:]
        random.Random(0).shuffle(shuffled)
        offered["the words shuffled"] = " ".join(shuffled)
    return {label: corrupted for label, corrupted in offered.items() if corrupted != text}


def choose_corrupted(text: str, answer: str, wrong: str) -> str:
    """The corrupted text: typed, or one of `corruptions` put in the box by its button."""
    offered = corruptions(text, answer, wrong)
    columns = st.columns(max(len(offered), 1))
    for column, (label, corrupted) in zip(columns, offered.items(), strict=False):
        column.button(label, key=f"attribution_offer_{len(label)}_{label[:1]}", on_click=st.session_state.__setitem__,
                      args=("attribution_corrupted", corrupted), use_container_width=True)
    return st.text_input("Corrupted text (as many tokens as the text)", key="attribution_corrupted",
                         placeholder="A text like the sidebar's, changed where the answer comes from")


def patching_section(runner: Runner, text: str, answer: str, wrong: str | None) -> None:
    st.subheader("Activation patching")
    st.caption("Each activation of the run on the text (clean) is put, one at a time, into the run on a corrupted "
               "text, and the logit difference after the last token is read: 0 = the corrupted run, 1 = the clean "
               "run. Where it comes back, that activation carries what tells the answer apart. This measures every "
               "path, not only the direct one; each patched activation is one run of the model.")
    if runner.facts.kind != "decoder" or not hasattr(runner, "model"):
        st.info("Activation patching here reads a causal language model's next token: choose SmolLM2 or a Hugging "
                "Face causal LM.", icon=":material/info:")
        return
    if wrong is None:
        st.info("Patching reads a logit difference: give a wrong answer above.", icon=":material/info:")
        return
    corrupted = choose_corrupted(text, answer, wrong)
    kinds = st.multiselect("Patch", KINDS, default=list(KINDS), format_func=KIND_LABELS.get,
                           key="attribution_patch_kinds")
    asked = (runner.facts.model_id, text, corrupted, answer, wrong, tuple(kinds))
    left, right = st.columns(2)
    if left.button("Patch", key="attribution_patch", disabled=not (corrupted and kinds), type="primary"):
        run_patching(runner, asked)
    right.button("Stop", key="attribution_patch_stop", help="Ends the patching after the batch under way and shows "
                 "what is done.")
    stored = st.session_state.get(RESULT)
    if stored is not None and stored[0] == asked:
        show_patching(runner.facts.model_id, stored[1])


def run_patching(runner: Runner, asked: tuple) -> None:
    """Patch, keeping the result in the session after every batch: the Stop button's rerun ends this script at its
    next call, and the page then shows what was done."""
    _, text, corrupted, answer, wrong, kinds = asked
    bar = st.progress(0.0, text="Patching…")

    def work() -> None:
        for done, total, found in patching_steps(runner, text, corrupted, answer, wrong, kinds):
            st.session_state[RESULT] = (asked, found)
            bar.progress(done / total, text=f"{done:,} of {total:,} patched runs")

    try:
        with run_slots():
            readable_failures("Activation patching", work)
    except UserError as error:
        show_error(str(error))
        return
    bar.empty()


def show_patching(model_id: str, found: Patching) -> None:
    st.caption(f"Logit difference {found.answer!r} − {found.wrong!r}: clean {found.clean:+.3f}, corrupted "
               f"{found.corrupted:+.3f}." + ("" if found.complete else " Stopped: the empty cells were not patched."))
    if abs(found.clean - found.corrupted) < 1e-3:
        st.warning("The two runs give the same logit difference: nothing to restore. Choose a corrupted text that "
                   "changes the answer.", icon=":material/warning:")
        return
    for kind, values in found.results.items():
        normalised = found.normalised(kind)
        title = f"Patching {KIND_LABELS[kind]}: the share of the clean logit difference restored"
        if kind == "head_out":
            figure = head_shares_heatmap(normalised, title, "restored")
            st.plotly_chart(figure, key="attribution_patched_heads")
        else:
            figure = patching_heatmap(normalised, found.clean_tokens, title)
            st.plotly_chart(figure, key=f"attribution_patched_{kind}")
        downloads(figure, file_name(model_id, "patching", kind), f"attribution_patched_{kind}_files",
                  constant(pd.DataFrame(normalised, index=pd.Index(range(len(values)), name="layer"))))
