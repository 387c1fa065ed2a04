"""The Attribution page's activation patching: a corrupted text (offered, or typed), the kinds to patch, a button that
patches with a progress bar and a stop that keeps what is done, and the result as layer x position and layer x head
grids (model/inspect/patching.py)."""

from __future__ import annotations

import random
import re

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.patching import (
    HEAD_KINDS,
    KINDS,
    MAX_PATCH_WORK,
    Patching,
    estimate_patching,
    kinds_of,
    patching_steps,
    prepare_patching,
    read_output,
)
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.runs import readable_failures
from attention_atlas.viz.attribution import head_shares_heatmap, patching_heatmap

KIND_LABELS = {"resid_pre": "the residual stream into each layer", "attn_out": "each attention output",
               "mlp_out": "each MLP output", "head_out": "each head's output (every position)",
               "cross_head_out": "each cross-attention head's output (every position)"}
RESULT = "_attribution_patching"  # session key: (what was patched, Patching so far)
ESTIMATE = "_attribution_estimate"  # session key: (what was patched, attribution patching's Patching)
REFUSED = "_attribution_refused"  # session key: (what was patched, why its patched runs were not made)
KIND_NAMES = {"resid_pre": "residual stream", "attn_out": "attention outputs", "mlp_out": "MLP outputs",
              "head_out": "heads", "cross_head_out": "cross-attention heads"}
SHOW_LABELS = {"exact": "patched runs", "estimate": "attribution patching's estimate"}


def corruptions(text: str, answer: str, wrong: str) -> dict[str, tuple[str, str]]:
    """Corrupted texts to offer, by kind: (its label, the text). The answer's and the wrong answer's words swapped,
    each number changed, the words shuffled (seeded: the same text every time)."""
    a, b = answer.strip(), wrong.strip()
    offered: dict[str, tuple[str, str]] = {}
    if a and b and a != b and (a in text or b in text):
        offered["swap"] = (f"{a} and {b} swapped", re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b",
                                                         lambda m: b if m.group(0) == a else a, text))
    if re.search(r"\d", text):
        offered["number"] = ("another number", re.sub(r"\d", lambda m: str((int(m.group(0)) + 1) % 10), text))
    words = text.split()
    if len(words) > 2:
        shuffled = words[:]
        random.Random(0).shuffle(shuffled)
        offered["shuffle"] = ("the words shuffled", " ".join(shuffled))
    return {kind: offer for kind, offer in offered.items() if offer[1] != text}


def answer_boxes(first: tuple[str, float], second: tuple[str, float], no_wrong: bool) -> tuple[str, str | None]:
    """The answer and the wrong answer, each one token: as typed, else the likeliest (`first`: token and probability)
    and the second likeliest; with `no_wrong`, a single space typed as the wrong answer means none."""
    left, right = st.columns(2)
    answer = left.text_input("Answer (one token)", key="attribution_answer",
                             placeholder=f"{first[0]!r}: the likeliest ({first[1]:.1%})",
                             help="Usually with its leading space: ' Mary'. Empty: the model's likeliest token.")
    wrong = right.text_input("Wrong answer (one token)", key="attribution_wrong",
                             placeholder=f"{second[0]!r}: the second likeliest ({second[1]:.1%})",
                             help="Its logit is subtracted: what tells the answer apart from it. Empty: the second "
                                  "likeliest token" + ("; a single space alone: no wrong answer." if no_wrong else "."))
    return answer or first[0], (None if no_wrong and wrong == " " else wrong or second[0])


def choose_corrupted(text: str, answer: str, wrong: str) -> str:
    """The corrupted text: typed, or one of `corruptions` put in the box by its button."""
    offered = corruptions(text, answer, wrong)
    columns = st.columns(max(len(offered), 1))
    for column, (kind, (label, corrupted)) in zip(columns, offered.items(), strict=False):
        column.button(label, key=f"attribution_offer_{kind}", on_click=st.session_state.__setitem__,
                      args=("attribution_corrupted", corrupted), width="stretch")
    return st.text_input("Corrupted text (as many tokens as the text)", key="attribution_corrupted",
                         placeholder="A text like the sidebar's, changed where the answer comes from")


def patching_section(runner: Runner, shown: Trace, answer: str, wrong: str | None, position: int) -> None:
    """Patching of the sidebar's text (`shown`) against a corrupted one, read after `position` of the decoder's
    sequence, both runs reading `shown`'s output where its run holds one (an encoder-decoder's, a toy GPT's)."""
    st.subheader("Activation patching")
    encoder_decoder = runner.facts.kind == "encoder-decoder"
    read_at = "the text's last token" if position == -1 else "the position chosen above"
    st.caption("Each activation of the run on the text (clean) is put, one at a time, into the run on a corrupted "
               f"text, and the logit difference after {read_at} is read: 0 = the corrupted run, 1 = "
               "the clean run. Where it comes back, that activation carries what tells the answer apart. This "
               "measures every path, not only the direct one; each patched activation is one run of the model."
               + (" The texts are sources: the encoder is patched, and each cross-attention head of the decoder; "
                  "both runs read this output." if encoder_decoder else ""))
    if wrong is None:
        st.info("Patching reads a logit difference: give a wrong answer above.", icon=":material/info:")
        return
    corrupted = choose_corrupted(shown.text, answer, wrong)
    offered = kinds_of(runner)
    if any(kind not in offered for kind in st.session_state.get("attribution_patch_kinds", ())):
        del st.session_state["attribution_patch_kinds"]  # kept from a model with other kinds
    kinds = st.multiselect("Patch", offered, default=list(offered), format_func=KIND_LABELS.get,
                           key="attribution_patch_kinds")
    lacking = [KIND_LABELS[kind] for kind in KINDS if kind not in offered]
    if lacking:
        st.caption(f"Not offered: {' and '.join(lacking)}. This model's attention layers have no hook holding it "
                   "(a block that adds attention's output scaled or beside another mixer's, or has no MLP).")
    asked = (runner.facts.model_id, shown.text, corrupted, answer, wrong, tuple(kinds), read_output(shown), position)
    left, right = st.columns(2)
    if left.button("Patch", key="attribution_patch", disabled=not (corrupted and kinds), type="primary",
                   help="First attribution patching's estimate (seconds: one backward pass), then every activation "
                        f"patched (one run each; here at most {MAX_PATCH_WORK:,} tokens of runs in all)."):
        run_patching(runner, asked)
    right.button("Stop", key="attribution_patch_stop", help="Ends the patching after the batch under way and shows "
                 "what is done.")
    exact, estimate, refused = (_stored(key, asked) for key in (RESULT, ESTIMATE, REFUSED))
    if refused is not None:
        st.info(refused, icon=":material/info:")
    if exact is None and estimate is None:
        return
    drawn = exact or estimate
    if exact is not None and estimate is not None:
        drawn = exact if st.radio("Show", ["exact", "estimate"], key="attribution_patch_show", horizontal=True,
                                  format_func=SHOW_LABELS.get) == "exact" else estimate
        st.caption(agreement(exact, estimate))
    show_patching(runner.facts.model_id, drawn, "patched" if drawn is exact else "estimated")


def _stored(key: str, asked: tuple) -> Patching | str | None:
    """What the session keeps under `key` for `asked` (a Patching, or REFUSED's sentence); None if for another."""
    stored = st.session_state.get(key)
    return stored[1] if stored is not None and stored[0] == asked else None


def agreement(exact: Patching, estimate: Patching) -> str:
    """How well the estimate foretold the patched runs, over the cells patched."""
    parts = []
    for kind, values in exact.results.items():
        done = np.isfinite(values)
        if done.sum() > 2:
            r = np.corrcoef(values[done], estimate.results[kind][done])[0, 1]
            parts.append(f"{KIND_NAMES[kind]} r = {r:.2f}")
    return ("Attribution patching's estimate against the patched runs (correlation over the cells patched): "
            + ("; ".join(parts) if parts else "too few cells patched yet") + ".")


def run_patching(runner: Runner, asked: tuple) -> None:
    """Both runs made once; the estimate from them (drawn while the rest runs), then every patched run unless they
    would read more than MAX_PATCH_WORK tokens (the estimate stays, with why), each kept in the session as it comes:
    the Stop button's rerun ends this script at its next call, and the page then shows what was done."""
    model_id, text, corrupted, answer, wrong, kinds, target, position = asked
    drawn, bar = st.empty(), st.progress(0.0, text="Attribution patching: one backward pass…")
    st.session_state.pop(REFUSED, None)

    def work() -> None:
        with run_slots():  # a few runs: the two texts, the estimate's backward pass
            runs = prepare_patching(runner, text, corrupted, answer, wrong, kinds, target=target, position=position)
            estimate = estimate_patching(runner, runs)
        st.session_state[ESTIMATE] = (asked, estimate)
        with drawn.container():
            show_patching(model_id, estimate, "first")
        for done, total, found in patching_steps(runner, runs, max_work=MAX_PATCH_WORK, slot=run_slots):  # a slot
            # a batch: other sessions' runs take turns between them
            st.session_state[RESULT] = (asked, found)
            bar.progress(done / total, text=f"Patching: {done:,} of {total:,} patched runs")

    try:
        readable_failures("Activation patching", work)
    except UserError as error:
        if _stored(ESTIMATE, asked) is None:  # the texts or the answers do not fit
            show_error(str(error))
            return
        st.session_state[REFUSED] = (asked, f"{error} Attribution patching's estimate, below, covers every "
                                            "kind.")  # the patched runs over the limit: the estimate stands
    drawn.empty()
    bar.empty()


def show_patching(model_id: str, found: Patching, word: str) -> None:
    """The grids of `found`, their figures' keys made with `word` ("patched", "estimated")."""
    what = "estimated by attribution patching" if found.estimated else "patched"
    st.caption(f"Logit difference {found.answer!r} − {found.wrong!r}: clean {found.clean:+.3f}, corrupted "
               f"{found.corrupted:+.3f}; each cell {what}."
               + ("" if found.output is None else f" Both runs read the output {found.output!r}.")
               + ("" if found.complete else " Stopped: the empty cells were not patched."))
    for kind, values in found.results.items():
        normalised = found.normalised(kind)
        prefix = "Attribution patching's estimate for" if found.estimated else "Patching"
        title = f"{prefix} {KIND_LABELS[kind]}: the share of the clean logit difference restored"
        if kind in HEAD_KINDS:
            figure = head_shares_heatmap(normalised, title, "restored", clickable=False, least=1.0)  # as the
            # position grids: 1 = the clean run, whatever the largest cell
        else:
            figure = patching_heatmap(normalised, found.clean_tokens, title)
        st.plotly_chart(figure, key=f"attribution_{word}_{kind}", alt=figure_label(figure, csv=True))
        downloads(figure, file_name(model_id, "patching" if not found.estimated else "estimate", kind),
                  f"attribution_{word}_{kind}_files",
                  constant(pd.DataFrame(normalised, index=pd.Index(range(len(values)), name="layer"))))
