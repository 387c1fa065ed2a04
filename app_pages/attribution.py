"""Attribution: which heads made a prediction. Direct logit attribution splits the logit of an answer (minus that of a
wrong answer) into what each head, each MLP and the embeddings write straight to the output, the norms' scales taken
from this run (model/inspect/attribution.py); a click on a head opens it on the Attention page. Below, the
contribution graph of the prediction (ui/contribution_views.py) and activation patching against a corrupted text
(ui/patching_views.py)."""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.attribution import Attribution, attribute, attribution_options, likeliest
from attention_atlas.model.inspect.contributions import contribution_options
from attention_atlas.ui.circuit_views import circuit_section
from attention_atlas.ui.contribution_views import contribution_section
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name
from attention_atlas.ui.messages import literal, show_error
from attention_atlas.ui.ndif_patching import ndif_patching
from attention_atlas.ui.page import PAGES, current_runner, current_trace, trace_with, weights_here
from attention_atlas.ui.patching_views import answer_boxes, patching_section
from attention_atlas.ui.pickers import clicked_head
from attention_atlas.ui.runs import readable_failures
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.attribution import block_shares_bars, head_shares_heatmap, layer_shares_bars
from attention_atlas.viz.tokens import visible_token

ATTENTION_PAGE = next(page.file for page in PAGES if page.title == "Attention")
SITES = {"heads": ("decoder.attn", "self"), "cross_heads": ("decoder.cross_attn", "cross")}  # Attribution field ->
# the heads' site, and the word of its figure's key
TOP = 10  # heads in the ranking
OPEN_CLICKED = "_attribution_open_clicked"  # session key: a head was clicked, open it on the Attention page


def choose_clicked(chart_key: str, site: str, heads: int) -> None:
    """The heatmap's callback: the clicked head opens on the Attention page."""
    clicked = clicked_head(chart_key, heads)
    if clicked is not None:
        open_head(site, *clicked)


def open_head(site: str, layer: int, head: int) -> None:
    """In a callback: this head becomes the app's chosen head (set before the next run, so that the Attention page
    opens on it), and the page is asked to go there."""
    st.session_state["site"], st.session_state["layer"], st.session_state["head"] = site, layer, head
    st.session_state[OPEN_CLICKED] = True


def choose_position(tokens: list[str]) -> int:
    """The position whose next token is explained: the last (-1, whatever the text's length) unless chosen."""
    positions = [*range(len(tokens) - 1), -1]
    if st.session_state.get("attribution_position", -1) not in positions:  # a shorter text than the last
        del st.session_state["attribution_position"]
    default = {} if "attribution_position" in st.session_state else {"index": len(positions) - 1}
    return st.selectbox("Position: the prediction made after", positions, key="attribution_position",
                        format_func=lambda p: f"{p % len(tokens)}: {visible_token(tokens[p])}"
                                              f"{' (the last)' if p == -1 else ''}",
                        help="The next token is predicted at every position; the last one predicts what follows "
                             "the text.", **default)


def choose_answers(runner: Runner, trace: Trace, position: int) -> tuple[str, str | None]:
    """The answer and the wrong answer, each one token: as typed, else the model's two likeliest."""
    first, second = likeliest(runner, trace, position, 2)
    return answer_boxes(first, second, no_wrong=True)


def measure_name(found: Attribution) -> str:
    if found.wrong is None:
        return f"logit of {found.answer!r}"
    return f"logit({found.answer!r}) − logit({found.wrong!r})"


def show(trace: Trace, found: Attribution) -> None:
    measure = measure_name(found)
    left, middle, right = st.columns(3)
    left.metric(f"The model's {measure}", f"{found.model_logit:+.3f}")
    middle.metric("The parts, summed", f"{found.total:+.3f}")
    right.metric("Embeddings · biases", f"{found.embeddings:+.3f} · {found.constant:+.3f}")
    if found.softcap:
        st.caption(f"This model caps its logits ({found.softcap:g} tanh(x / {found.softcap:g})): the parts add up "
                   "to the logit before the cap.")
    name = file_name(trace.facts.model_id, "attribution", found.position)
    for field, (site, word) in SITES.items():
        shares = getattr(found, field)
        if shares is None:
            continue
        label = "cross-attention" if field == "cross_heads" else "attention"
        figure = head_shares_heatmap(shares, f"Each {label} head's direct share of the {measure}", "share")
        st.plotly_chart(figure, key=f"attribution_{word}_heads", selection_mode="points",
                        on_select=partial(choose_clicked, f"attribution_{word}_heads", site, shares.shape[1]),
                        alt=figure_label(figure, csv=True))
        downloads(figure, f"{name}.{field}", f"attribution_{word}_files",
                  constant(pd.DataFrame(shares, index=pd.Index(range(len(shares)), name="layer"))))
    parts = {"attention heads": found.heads.sum(1) + found.attention_bias, "MLP": found.mlp}
    if found.cross_heads is not None:
        parts["cross-attention"] = found.cross_heads.sum(1) + found.cross_bias
    figure = layer_shares_bars(parts, "Each layer's direct share, by part", "share")
    st.plotly_chart(figure, key="attribution_layers", alt=figure_label(figure, csv=True))
    downloads(figure, f"{name}.layers", "attribution_layers_files",
              constant(pd.DataFrame(parts, index=pd.Index(range(len(found.mlp)), name="layer"))))
    if found.blocks:  # a hybrid's other blocks, or what a block that adds attention scaled writes besides its heads
        figure = block_shares_bars(found.blocks, f"The other parts' direct share of the {measure}", "share")
        st.plotly_chart(figure, key="attribution_blocks", alt=figure_label(figure, csv=True))
        downloads(figure, f"{name}.blocks", "attribution_blocks_files",
                  constant(pd.DataFrame({"share": list(found.blocks.values())},
                                        index=pd.Index(list(found.blocks), name="part"))))
    st.dataframe(ranking(found), hide_index=True)


def ranking(found: Attribution) -> pd.DataFrame:
    """The TOP heads by the size of their share, with its sign."""
    rows = [(f"{'cross ' if site.endswith('cross_attn') else ''}layer {layer} · head {head}", share)
            for site, layer, head, share in found.ranked()[:TOP]]
    return pd.DataFrame(rows, columns=["head", "direct share"])


def page() -> None:
    st.header("Attribution")
    st.caption("Which heads made the prediction? Direct logit attribution splits the logit of an answer (minus that "
               "of a wrong answer) into what each head, each MLP and the embeddings write straight to the output: "
               "each part's vector at that position through the final norm (its scale taken from this run) onto the "
               "unembedding. Red adds to the answer, blue takes away. It shows the direct path only: a head whose "
               "output later heads read is not credited here for what they then do.")
    shown = current_trace()
    runner = current_runner()
    if shown.facts.kind == "encoder":
        st.info(f"{literal(shown.facts.model_id)} is an encoder: it reads the whole text at once and predicts no next "
                "token, so there is no logit to attribute. Choose a causal language model (SmolLM2, toy-gpt-date) or "
                "an encoder-decoder.", icon=":material/info:")
        return
    if st.session_state.pop(OPEN_CLICKED, False):
        st.switch_page(ATTENTION_PAGE)
    if not weights_here("Direct logit attribution (with its contribution graph and circuits)"):
        ndif_patching(runner, shown)  # its patched runs and gradients are NDIF's to make
        return
    trace = trace_with(tuple(dict.fromkeys((*attribution_options(runner).hooks, *contribution_options().hooks))))
    # one run for the attribution and the graph
    tokens = trace.target_tokens if trace.facts.kind == "encoder-decoder" else trace.tokens
    position = choose_position(tokens)
    try:  # a refusal (no readout, a hook the model lacks, parts that do not add up) is its sentence; a bug is told
        # as a failure of its kind, its details in the server's log
        answer, wrong = readable_failures("Direct logit attribution", lambda: choose_answers(runner, trace, position))
    except UserError as error:
        show_error(str(error))
        return
    try:
        found = readable_failures("Direct logit attribution", lambda: per_trace(
            trace, ("attribution", answer, wrong, position), lambda: attribute(runner, trace, answer, wrong, position)))
    except UserError as error:  # a hybrid's too: its other blocks are no part of the split; patching still applies
        show_error(str(error))
    else:
        show(trace, found)
    contribution_section(runner, trace, position, open_head)  # says why where it does not apply
    patching_section(runner, shown, answer, wrong, position)  # every path, where the split refused the direct one
    circuit_section(runner, shown, answer, wrong, open_head)  # the edges that carry it, against the same corruption


page()
