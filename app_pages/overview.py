"""Overview, where the app opens: what the app is, one attention head of the text, what the model made of
the text, the tokens it saw, and the model itself."""

from __future__ import annotations

import weakref
from functools import partial

import numpy as np
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.score_words import PREVIOUS_TOKEN
from attention_atlas.ui.downloads import downloads, figure_label, file_name, matrix_table, whole_csv
from attention_atlas.ui.messages import literal, show_error
from attention_atlas.ui.ndif_choice import typed_key
from attention_atlas.ui.page import current_request, current_trace
from attention_atlas.ui.pickers import choose_head, opening_head, site_label
from attention_atlas.ui.trace_files import choose_model, file_trace, open_trace_file, trace_bytes, upload_limit
from attention_atlas.viz.heatmap import SMALL_WINDOW, attention_heatmap, similarity_heatmap
from attention_atlas.viz.outputs import forced_table, model_card, next_token_bars, percent, token_table
from attention_atlas.viz.tokens import visible_token

HEAD_HEIGHT = 400  # px: the head and the lines above it fit a 1280 x 720 projector without scrolling
OPENED_UPLOADS = "_opened_trace_uploads"  # session key: {upload's file id: its id in the model list}


def head_section(trace: Trace) -> None:
    """One head, with its CSV; a text longer than SMALL_WINDOW tokens shows its last SMALL_WINDOW² cells."""
    site_of_note, layer_of_note, head_of_note, share, role = opening_head(trace)
    site, layer, head = choose_head(trace)
    if (site, layer, head) == (site_of_note, layer_of_note, head_of_note):
        st.caption(opening_caption(trace.facts.layer_words(layer), head, share, role))
    visible = trace.masks[site]  # (q_len, k_len)
    n_q, n_k = visible.shape
    rows, cols = np.arange(n_q), np.arange(n_k)
    if max(n_q, n_k) > SMALL_WINDOW:
        rows, cols = rows[-SMALL_WINDOW:], cols[-SMALL_WINDOW:] if n_k == n_q else cols[:SMALL_WINDOW]
        st.caption(f"Drawn: query rows {rows[0]}–{rows[-1]} and key columns {cols[0]}–{cols[-1]} of "
                   f"{n_q:,} × {n_k:,}. The Attention page's *One head* moves this window.")
    drawn = trace.head_pattern(site, layer, head, rows)[:, cols]  # (q_shown, k_shown): only the rows drawn computed
    queries, keys = trace.query_tokens(site), trace.key_tokens(site)
    figure = attention_heatmap(drawn, [queries[i] for i in rows], [keys[i] for i in cols],
                               f"{site_label(trace, site)} · {trace.facts.layer_words(layer)} · head {head}",
                               row_positions=rows, col_positions=cols, masked=~visible[np.ix_(rows, cols)],
                               height=HEAD_HEIGHT)
    st.plotly_chart(figure, key="overview_heatmap", alt=figure_label(figure, csv=True))
    name = f"{trace.facts.model_id}.{site}.{layer}.{head}".replace("/", "_")
    if whole_csv(n_q, n_k):  # the whole matrix: a copy, not a view (the CSV's maker outlives the run)
        table = partial(matrix_table, trace.head_pattern(site, layer, head).copy(), queries, keys)
    else:
        table = partial(matrix_table, drawn.copy(), [queries[i] for i in rows], [keys[i] for i in cols], rows, cols)
    downloads(figure, name, "overview_heatmap", table)


def opening_caption(layer_words: str, head: int, share: float, role: str = "") -> str:
    """What the head the page opened on (in `layer_words`: "layer 3") does, said from its role (ui/role_views.py);
    called a previous-token head only when it mostly is one."""
    named = f"{layer_words.capitalize()} · head {head}"
    if role == "induction":
        return (f"{named} is an *induction head*: where a token occurred before, it puts {percent(share)} of its "
                "attention (on average) on the token that followed it then, the clearest pattern of this run.")
    if share >= PREVIOUS_TOKEN:
        return (f"{named} puts {percent(share)} of each token's attention (on average) on the token before it: a "
                "*previous-token head*, the clearest pattern of this run.")
    return (f"{named} looks at the token before each token more than any other head of this run: {percent(share)} of "
            "its attention on average.")


def output_section(trace: Trace) -> None:
    """What the model made of the text, said as what it is (generated, next token, a given target, vectors)."""
    facts, outputs = trace.facts, trace.outputs
    for caution in trace.cautions:
        st.warning(caution, icon=":material/warning:")
    outside = " (outside the training range)" if trace.cautions else ""
    if trace.output_kind == "embeddings":
        st.subheader("Token similarity")
        st.caption("An encoder's output is one vector per token. Cosine similarity of the last layer's vectors: "
                   "tokens the model sees alike are red.")
        figure = similarity_heatmap(outputs["token_similarity"], trace.tokens, "cosine similarity")
        st.plotly_chart(figure, key="overview_similarity", alt=figure_label(figure, csv=False))
        return
    if trace.output_kind == "teacher-forced":
        forced_section(trace, outside)
    else:
        st.subheader("Output" + outside)
        # literal (spaces, markdown, specials); one token alone with its whitespace made visible (a newline would
        # look like no output)
        shown = visible_token(trace.output_text) if trace.output_kind == "next token" else trace.output_text or "∅"
        st.code(shown, language=None, wrap_lines=True)
        st.caption(output_caption(trace))
    if "top_next_tokens" in outputs:
        after = "the text and the target" if trace.output_kind == "teacher-forced" else "the text"
        st.caption(f"The ten most likely next tokens after {after}, with the masks chosen in the sidebar.")
        bars = next_token_bars(outputs["top_next_tokens"], outputs["top_next_probs"], "next token")
        st.plotly_chart(bars, key="overview_next_tokens", alt=figure_label(bars, csv=False))
    if facts.kind == "encoder-decoder" and trace.options.causal == "off":
        st.caption("With the causal mask off, every decoder position sees the whole output, so the traced pass's "
                   "rows can predict other tokens than the ones generated step by step.")


def output_caption(trace: Trace) -> str:
    masks = "the masks the model was trained with" if trace.options.trained_masks else \
        "the masks chosen in the sidebar (re-reading the whole sequence at every step)"
    if trace.output_kind == "next token":
        return ("The most likely next token only (· a space, \\n a newline): longer continuations are computed "
                "for prompts up to 512 tokens.")
    if trace.facts.kind == "decoder":
        return f"The model's greedy continuation of the text, under {masks}; its first token is the top bar below."
    return f"The model's greedy output, one token at a time, under {masks}."


def forced_section(trace: Trace, outside: str) -> None:
    """A given target: each of its tokens with the probability and rank the model gave it."""
    table = forced_table(trace.outputs)
    right = int(table["right"].sum())
    st.subheader("Given target" + outside)
    st.code(trace.output_text, language=None, wrap_lines=True)
    st.caption(f"The model reads the target (teacher forcing). Its own top choice matches {right} of "
               f"{len(table)} target tokens. Rank 1 = the model's choice.")
    st.dataframe(table.style.format({"probability": "{:.1%}"}),
                 height=min(400, 38 + 35 * len(table)), key="overview_forced")


def tokens_section(trace: Trace) -> None:
    st.subheader("Tokens")
    st.caption("Special tokens (start, end, separator, padding) are added by the tokenizer, not typed.")
    tokens = token_table(trace.tokens, trace.ids, trace.is_special(trace.ids))
    st.dataframe(tokens, height=min(400, 38 + 35 * len(tokens)), key="overview_tokens")


def trace_file_section(trace: Trace) -> None:
    """Save this run as a trace file, or open one (saved here, or by `attention-atlas trace --out` or
    `trace.save(path)` in Python, on any machine): it opens as a choice of the sidebar's model list."""
    with st.expander("Trace files: save this run, or open a saved one", icon=":material/file_open:"):
        held = weakref.ref(trace)  # the button's maker outlives the run: it must not keep the trace (ui/downloads.py)
        st.download_button("Download this run (.npz)", data=partial(trace_bytes, held, typed_key()),
                           key="overview_trace_download",
                           file_name=file_name(trace.facts.model_id, "trace", "npz"), mime="application/octet-stream",
                           on_click="ignore", icon=":material/download:",
                           help="Every hook this run recorded, its tokens, text, masks and output, in numpy's .npz "
                                "format (docs/hooks.md): `attention_atlas.load_trace(path)` reads it in Python.")
        limit = upload_limit()
        upload = st.file_uploader("Open a trace file (.npz)", type=["npz"], key="overview_trace_upload",
                                  help="A run saved here, by `attention-atlas trace --out`, or by `trace.save(path)` "
                                       "in Python. Read as numpy arrays only: never a pickle. Its arrays may take "
                                       f"{limit / 2**20:,.0f} MiB at most once read (at most a quarter of this "
                                       "server's memory for runs).")
        if upload is None:
            return
        opened = st.session_state.setdefault(OPENED_UPLOADS, {})  # upload id -> its id in the model list
        if file_trace(opened.get(upload.file_id, "")) is None:  # read once, and again if the server let go of it
            try:
                opened[upload.file_id] = open_trace_file(upload.name, upload.getvalue())
            except UserError as error:
                show_error(f"That file cannot be opened: {error}")
                return
        st.button(f"Show {upload.name}", key="overview_trace_open", on_click=choose_model,
                  args=(opened[upload.file_id],), icon=":material/open_in_new:")
        st.caption("It is listed in the sidebar's model list for this session.")


def page() -> None:
    """The page (in a function: no module global holds the trace; see ui/downloads.py)."""
    trace = current_trace()
    st.subheader(f"Attention Atlas · {trace.facts.model_id}", anchor=False)
    if current_request().trace_file:
        st.markdown(f"A saved run of {literal(trace.facts.model_id)}, opened from the trace file "
                    f"{literal(current_request().trace_file)}: what happened inside the model, as it was recorded.  \n"
                    "Below: one attention head reading its text (hover a cell for its weight), and what the model made "
                    "of it.")
    else:
        st.markdown("Attention Atlas runs a real transformer on the text in the sidebar and shows what happens "
                    "inside it.  \nBelow: one attention head reading your text (hover a cell for its weight), and "
                    "what the model made of it.")
    if trace.fallback:
        st.warning(trace.fallback)
    head_col, output_col = st.columns([3, 2])
    with head_col:
        head_section(trace)
    with output_col:
        output_section(trace)
    tokens_col, card_col = st.columns([3, 2])
    with tokens_col:
        tokens_section(trace)
    with card_col:
        st.subheader("Model")
        st.caption(trace.facts.family + (f" · {trace.facts.notes['task']}" if "task" in trace.facts.notes else ""))
        card = model_card(trace.facts)
        st.table(card)  # long values (where the layers are, grouped-query attention) wrap: a dataframe cuts them
    trace_file_section(trace)


page()
