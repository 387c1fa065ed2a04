"""Generate: the model writes one token at a time; for each new token its probability, the ten tokens it
weighed (force one and go on from there), and the attention of the query that chose it over the whole context,
per layer and per head (and over the source, for encoder-decoders)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.generation.decoding import Step, Stepper
from attention_atlas.model.core.generation.sampling import MAX_NEW_TOKENS, DecodeSettings
from attention_atlas.model.core.options import RunOptions
from attention_atlas.plot.generating import layer_means, step_figure, step_kinds
from attention_atlas.ui import generation as gen
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name, matrix_table
from attention_atlas.ui.messages import literal, show_error
from attention_atlas.ui.page import current_request, current_runner, current_trace
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.runs import readable_failures
from attention_atlas.viz.generation import alternatives_bar
from attention_atlas.viz.tokens import visible_token

MASK_NOTES = {
    "auto": "Generation uses the masks the model was trained with (the decoder's causal mask), as the sidebar says.",
    "on": "Generation runs under the sidebar's choice, the causal mask on everywhere.",
    "off": "Generation runs under the sidebar's choice, no causal mask anywhere: a what-if the model never saw "
           "in training. Every token, its probability and its attention below come from the same passes.",
}


DEFAULTS = {"generate_method": "greedy", "generate_temperature": 1.0, "generate_top_k": 0, "generate_top_p": 1.0,
            "generate_seed": 0, "generate_max_new": 16}


def choose_settings() -> DecodeSettings:
    """The decoding controls (bad values are allowed in, and explained: see DecodeSettings.problems). Defaults
    go in the session, not the widgets: the values are kept across pages (the page's `keeps` in ui.page.PAGES)."""
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
    method = st.radio("Decoding", ["greedy", "sample"], key="generate_method", horizontal=True,
                      help="greedy: always the most likely token. sample: draw from the distribution, shaped by "
                           "temperature, top-k and top-p, with a seed (the same seed gives the same tokens).")
    sample = method == "sample"
    cols = st.columns(5)
    temperature = cols[0].number_input("Temperature", step=0.1, key="generate_temperature",
                                       disabled=not sample, help="0 or below: greedy.")
    top_k = cols[1].number_input("Top-k", step=1, key="generate_top_k", disabled=not sample,
                                 help="Keep the k most likely tokens; 0 keeps all.")
    top_p = cols[2].number_input("Top-p", step=0.05, key="generate_top_p", disabled=not sample,
                                 help="Keep the fewest tokens whose probabilities add up to p, in (0, 1].")
    seed = cols[3].number_input("Seed", min_value=0, step=1, key="generate_seed", disabled=not sample)
    max_new = cols[4].number_input("Max new tokens", step=1, key="generate_max_new",
                                   help=f"1 to {MAX_NEW_TOKENS}; generation also stops at the end token.")
    url_state.write(decoding=method, max_new=int(max_new), **{  # a greedy link carries no sampling settings
        name: value if sample else None
        for name, value in (("temperature", temperature), ("top_k", int(top_k)), ("top_p", top_p), ("seed", int(seed)))
    })
    return DecodeSettings(not sample, float(temperature), int(top_k), float(top_p), int(seed), int(max_new))


def buttons(key: tuple, settings: DecodeSettings, stepper: Stepper, usable: bool) -> None:
    """Step, Run and Reset; a click generates with `stepper` (the model runs only here)."""
    current = gen.current(key)  # Reset (a callback) has already run
    done = current is not None and bool(current.stopped)
    with st.container(horizontal=True, key="generate_buttons"):
        step = st.button("Step", key="generate_step", icon=":material/skip_next:", disabled=not usable or done,
                         help="Add one token.")
        run = st.button("Run", key="generate_run", icon=":material/fast_forward:", disabled=not usable or done,
                        help="Add tokens up to the limit or the end token.")
        st.button("Reset", key="generate_reset", icon=":material/restart_alt:", help="Back to the prompt.",
                  on_click=gen.reset)  # a callback: runs before this run draws Step and Run
    if not (step or run):
        return
    try:
        generation = current or gen.start(key, stepper)
    except UserError as error:
        show_error(str(error))
        return
    n = 1 if step else settings.max_new
    bar = st.progress(0.0, text="Generating…") if run else None
    total = max(1, min(n, settings.max_new - len(generation.ids)))
    with run_slots():  # the model runs: one of the server's MAX_RUNS at once
        gen.extend(generation, stepper, settings, n,
                   lambda k: bar.progress(k / total, text=f"Generating… {k}/{total}") if bar else None)
    st.session_state["generate_follow"] = True  # show the newest token
    st.rerun()  # the buttons above were drawn before this generation: draw them again (Step off once it ends)


def make_stepper() -> Stepper | None:
    """A stepper for this run's model, text and causal choice (None after saying why it cannot be made)."""
    request = current_request()
    try:
        return readable_failures(f"Preparing {request.model_id} to generate",
                                 lambda: current_runner().stepper(request.text, RunOptions(causal=request.causal)))
    except UserError as error:
        show_error(str(error))
        return None


def use_generation(text: str | None, target: str | None) -> None:
    """Button callback (runs before the sidebar is drawn): the sidebar's text, or its given target, becomes the
    generated sequence."""
    if text is not None:
        st.session_state["text"] = text
    if target is not None:
        st.session_state["decoder_mode"] = "given target"
        st.session_state["target"] = target
    st.session_state["generate_opened"] = True


def sequence_section(generation: gen.Generation, continues_text: bool, text: str) -> None:
    """The prompt and what was generated, and the button that opens it everywhere. continues_text: the
    generation is more of the text (a Hugging Face causal LM), not an answer to it (the toy models' output)."""
    st.code(text + generation.text if continues_text else text + " ⟶ " + generation.text, language=None,
            wrap_lines=True)
    if generation.stopped:
        st.caption(generation.stopped)
    st.dataframe(pd.DataFrame({"token": [visible_token(t) for t in generation.tokens],
                               "probability": [s.probability for s in generation.steps], "chosen": generation.how},
                              index=pd.RangeIndex(1, len(generation.ids) + 1, name="step")),
                 key="generate_steps_table", height=min(180, 40 + 35 * len(generation.ids)), width=440,
                 column_config={"probability": st.column_config.NumberColumn(format="percent")})
    args = (text + generation.text, None) if continues_text else (None, generation.text)
    st.button("Open this sequence on every page", key="generate_open", on_click=use_generation, args=args,
              icon=":material/open_in_new:", disabled=not generation.text,
              help="Hugging Face causal LMs: the text becomes prompt + generation. Toy models and encoder-decoders: "
                   "the sidebar's Output becomes 'given target' with the generated text.")


def step_section(generation: gen.Generation, settings: DecodeSettings, stepper: Stepper) -> None:
    """One step: its alternatives (force one) and its attention rows."""
    labels = [f"{i + 1}: {visible_token(t)} ({p.probability:.1%}, {how})"
              for i, (t, p, how) in enumerate(zip(generation.tokens, generation.steps, generation.how, strict=True))]
    if st.session_state.pop("generate_follow", False) or st.session_state.get("generate_pick", 0) >= len(labels):
        st.session_state["generate_pick"] = len(labels) - 1
    index = st.selectbox("Generated token", range(len(labels)), key="generate_pick",
                         format_func=lambda i: labels[i])
    step = generation.steps[index]
    context = generation.context_tokens + generation.tokens[:index]
    left, right = st.columns([1, 2])
    with left:
        alternatives(generation, settings, stepper, step, index)
    with right:
        attention_rows(step, context, generation.source_tokens, generation.key[0], index)


def alternatives(generation: gen.Generation, settings: DecodeSettings, stepper: Stepper, step: Step,
                 index: int) -> None:
    """The ten most likely tokens at this step, and forcing one."""
    names = generation.alternatives[index]
    chosen = next((i for i, t in enumerate(step.top_ids) if t == step.token_id), None)
    bars = alternatives_bar(names, step.top_probs, chosen, f"Top {len(names)} at step {index + 1}")
    st.plotly_chart(bars, key="generate_alternatives", alt=figure_label(bars, csv=False))
    pick = st.selectbox("Force instead", range(len(names)), key="generate_force_pick",
                        format_func=lambda i: f"{i + 1}. {visible_token(names[i])} ({step.top_probs[i]:.1%})")
    if st.button("Force and continue", key="generate_force", icon=":material/call_split:"):
        with run_slots():
            gen.force(generation, stepper, settings, index, int(step.top_ids[pick]))
        st.rerun()


def attention_rows(step: Step, context: list[str], source: list[str], model_id: str, index: int) -> None:
    """The choosing query's attention: layers (mean over heads) and one layer's heads, self and cross."""
    layers = step.self_rows.shape[0]
    if st.session_state.get("generate_layer", 0) >= layers:  # another model's layer
        st.session_state["generate_layer"] = 0
    words = current_trace().facts.layer_words  # a hybrid's true layer numbers
    layer = st.selectbox("Layer (per-head view)", range(layers), key="generate_layer", format_func=words)
    for kind in step_kinds(step):
        fig = step_figure(step, index, context, source, kind, layer_words=words)
        st.plotly_chart(fig, key=f"generate_{kind}_layers", alt=figure_label(fig, csv=True))
        keys = context if kind == "self" else source
        rows = step.self_rows if kind == "self" else step.cross_rows  # (layers, heads, keys)
        table = matrix_table(layer_means(rows), [words(i) for i in range(layers)], keys)
        downloads(fig, file_name(model_id, f"step{index + 1}", kind, "layers"), f"generate_{kind}_layers",
                  constant(table))
        heads = step_figure(step, index, context, source, kind, layer, words)
        st.plotly_chart(heads, key=f"generate_{kind}_heads", alt=figure_label(heads, csv=False))


def page() -> None:
    trace = current_trace()
    facts = trace.facts
    st.header("Generate")
    if facts.kind == "encoder":
        st.info(literal(f"{facts.model_id} is an encoder: it reads the whole text at once and has no next-token "
                        "head, so it does not generate. Pick a causal LM (smollm2, toy-gpt-date) or an "
                        "encoder-decoder (toy-date, toy-copy, toy-reverse) in the sidebar."),
                icon=":material/info:")
        return
    request = current_request()
    hf_causal_lm = facts.kind == "decoder" and "Hugging Face" in facts.family
    st.caption(MASK_NOTES[request.causal] + (" Steps reuse the model's KV cache (past_key_values)."
                                            if request.causal == "auto" and hf_causal_lm else ""))
    if st.session_state.pop("generate_opened", False):
        st.success("Every page now opens the generated sequence.", icon=":material/check_circle:")
    settings = choose_settings()
    for problem in settings.problems():  # our words and numbers only: no user text
        st.error(problem, icon=":material/error:")
    if not settings.greedy and settings.temperature <= 0:
        st.info("A temperature of 0 or below means greedy decoding: the most likely token every time.",
                icon=":material/info:")
    stepper = make_stepper()  # reads the text (tokens only): the model runs on a click
    if stepper is None:
        return
    too_long = gen.context_problem(stepper)
    if too_long is not None:  # said before a click, and Step and Run are off
        st.info(too_long, icon=":material/info:")
    key = (request.model_id, request.device, request.precision, request.text, request.causal, settings)
    buttons(key, settings, stepper, not settings.problems() and too_long is None)
    generation = gen.current(key)
    if generation is None or not generation.steps:
        if too_long is None:
            st.info("Press **Step** to add one token, or **Run** to generate up to the limit.",
                    icon=":material/info:")
        return
    sequence_section(generation, hf_causal_lm, request.text)
    step_section(generation, settings, stepper)


page()
