"""Step through: one head of one layer computed again from the model's weights on the person's tokens, with
the real numbers at every step (X, W_Q/W_K/W_V, Q, K, V, rotation, QKᵀ, scale, mask, softmax, × V, concat,
W_O, residual, norm), checked against what the model itself computed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.head_math import HeadSteps, compute_head, concat_heads, output_projection
from attention_atlas.model.inspect.head_weights import HeadWeights, head_weights
from attention_atlas.model.inspect.norm_output import block_input
from attention_atlas.model.inspect.offered import offered_hooks
from attention_atlas.model.inspect.positions import bias_name
from attention_atlas.model.inspect.step_hooks import StepNames, hooks_to_capture, step_checks, step_names
from attention_atlas.ui import url_state
from attention_atlas.ui.downloads import file_name
from attention_atlas.ui.matrix_view import show_matrix
from attention_atlas.ui.page import current_runner, current_trace, show_open_tab, trace_with, weights_here
from attention_atlas.ui.pickers import choose_head, keep_valid
from attention_atlas.ui.score_terms import score_terms_view
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.ui.why_here import why_here
from attention_atlas.viz.step_through import dimension_names, gqa_text, latent_steps, scores_latex, softmax_latex
from attention_atlas.viz.tokens import position_label

STEPS = ["1 · X and the weights", "2 · Q, K, V", "3 · Scores → pattern", "4 · × V, W_O, residual, norm"]  # the
# page's tabs (the URL's `step_view`): only the open one is drawn
HELD = 0.01  # a recomputed step off the model's by more than this share of its largest value is refused; not
UNHELD = ("hook_q", "hook_k", "hook_v")  # the projections, which a family may show as it folds them (OPT's scaled
# queries): what they make is held in the scores and Z
FLOAT16_NOTE = ("this app keeps Hugging Face attention patterns in float16 (half the memory), so they differ from "
                "the float32 recomputation by up to about 5·10⁻⁴ of each weight; the head output, computed from the "
                "model's float32 pattern, is the exact check")


@dataclass(frozen=True)
class Head:
    """The chosen head: the page's own trace (this layer's hooks), the weights, and every step recomputed."""

    trace: Trace
    site: str
    layer: int
    names: StepNames
    weights: HeadWeights
    steps: HeadSteps
    x: np.ndarray  # (q_len, d_model)
    x_kv: np.ndarray  # (k_len, d_model)
    before: np.ndarray  # (q_len, d_model) the residual stream the block's output is added to
    normed: np.ndarray | None  # (q_len, d_model) the output of the norm after the residual sum, if there is one

    def captured(self, hook: str) -> np.ndarray:
        return self.trace.captured[f"{self.names.attention}.{hook}"]

    @property
    def stem(self) -> str:
        """The start of download file names: "toy-date.encoder.attn.1.2"."""
        return file_name(self.trace.facts.model_id, self.site, self.layer, self.weights.head)

    @property
    def rows(self) -> list[str]:
        return [position_label(i, t) for i, t in enumerate(self.trace.query_tokens(self.site))]

    @property
    def cols(self) -> list[str]:
        return [position_label(i, t) for i, t in enumerate(self.trace.key_tokens(self.site))]


def load_head(trace: Trace, site: str, layer: int, head: int) -> Head:
    """Trace the layer's hooks (cached), read the head's weights and recompute it (kept with that trace)."""
    runner = current_runner()
    offered = offered_hooks(runner)  # the steps' hooks follow what the block has
    names = step_names(trace.facts, site, layer, offered)
    full = trace_with(hooks_to_capture(trace, site, layer, offered))
    x = block_input(runner, names.x, full.captured[names.x])
    x_kv = next(full.captured[m] for m in names.memory if m in full.captured) if names.memory else x
    source = full.pattern_sources.get(Site.of(site).pattern_name(layer))  # what the layer's attention read
    mask = full.masks[site] if source is None else np.asarray(source.allowed)  # (q_len, k_len), windows too
    weights = per_trace(full, ("step weights", site, layer, head),
                        lambda: head_weights(runner, site, layer, head, len(x), len(x_kv), source))
    steps = per_trace(full, ("step head", site, layer, head), lambda: compute_head(weights, x, x_kv, mask))
    before = block_input(runner, names.before, full.captured[names.before])
    normed = None if names.norm is None else block_input(runner, names.norm, full.captured[names.norm])
    return Head(full, site, layer, names, weights, steps, x, x_kv, before, normed)


def checks(h: Head) -> pd.DataFrame:
    """Each recomputed step beside the model's own value: the largest absolute difference, and whether it is held."""
    hf = h.trace.facts.family.endswith("Hugging Face)")
    rows = step_checks(h.trace, h.names, h.site, h.layer, h.weights, h.steps, h.x, h.before)
    return pd.DataFrame([{"step": step, "max |recomputed − model|": f"{np.abs(mine - theirs).max():.2e}",
                          "the model's value": hook + (" (float16)" if hf and hook == "hook_pattern" else ""),
                          "held": "—" if hook in UNHELD else "yes" if np.abs(mine - theirs).max() <= HELD * max(
                              1.0, float(np.abs(theirs).max())) else "no"} for step, mine, theirs, hook in rows])


def show_check(h: Head) -> bool:
    """The check's summary and table; False (a refusal said) where a step is not the model's."""
    table = checks(h)
    if off := list(table["step"][table["held"] == "no"]):
        st.error(f"Step through cannot show this head: recomputed from the weights, {', '.join(off)} differ from the "
                 f"model's own values by more than {HELD:.0%} of their size, so its steps would not be the model's.")
        st.table(table)
        return False
    worst = dict(zip(table["step"], table["max |recomputed − model|"], strict=True))
    hf = h.trace.facts.family.endswith("Hugging Face)")
    st.success(f"Recomputed here from the weights and X: the pattern matches the model's to "
               f"{worst['pattern (softmax)']}{' (its float16 copy)' if hf else ''}, the head's output to "
               f"{worst['head output Z = A V']} (largest absolute difference).", icon=":material/check_circle:")
    with st.expander("Every step checked against the model's own numbers"):
        st.table(table)
        if hf:
            st.caption(f"Pattern: {FLOAT16_NOTE}.")
    return True


def show_inputs(h: Head, values: bool) -> None:
    pre = h.trace.facts.norm.startswith("pre")
    st.latex(r"X \in \mathbb{R}^{\text{tokens} \times d_{\text{model}}}")
    st.caption("The layer's input after its norm: this model normalises before attention (pre-norm)." if pre else
               "The residual stream itself: this model normalises after the residual sum (post-norm).")
    d_model = dimension_names(h.x.shape[1])
    source = f"{h.names.x} × weight + bias" if h.names.x.endswith(".hook_normalized") else h.names.x
    show_matrix(h.x, h.rows, d_model, f"X ({source})", ("tokens", "d_model"), "step_x", show_values=values,
                stem=h.stem)
    if Site.of(h.site).is_cross:
        st.caption("Cross-attention: keys and values read the encoder's output.")
        show_matrix(h.x_kv, h.cols, d_model, "X_enc (the encoder's output)", ("source tokens", "d_model"),
                    "step_x_enc", show_values=values, stem=h.stem)
    w = h.weights
    if w.latent is not None:
        return show_latent(h, values)
    st.latex(rf"W_Q^{{({w.head})}},\ W_K^{{({w.kv_head})}},\ W_V^{{({w.kv_head})}} \in "
             rf"\mathbb{{R}}^{{d_{{\text{{model}}}} \times d_{{\text{{head}}}}}},\ d_{{\text{{head}}}} = {w.d_head}")
    d_head = dimension_names(w.d_head, "h")
    for name, matrix, index in (("W_Q", w.w_q, w.head), ("W_K", w.w_k, w.kv_head), ("W_V", w.w_v, w.kv_head)):
        show_matrix(matrix, d_model, d_head, f"{name}, the slice of head {index}", ("d_model", "d_head"),
                    f"step_{name.lower()}", show_values=values, stem=h.stem)


def show_latent(h: Head, values: bool) -> None:
    """Multi-head latent attention's weights and latents (DeepSeek-V2/V3), each with its real shape."""
    w, s, lat = h.weights, h.steps, h.weights.latent
    assert lat is not None
    st.markdown("**Multi-head latent attention**: keys and values are made from one latent a token (through an "
                "RMSNorm) and a rotary key part every head shares; Q and K are [nope | rope], V narrower.")
    matrices = {"w_qa": None if lat.q_a is None else lat.q_a[0], "c_q": s.c_q, "w_q": w.w_q, "w_kva": lat.kv_a[0],
                "c_kv": s.c_kv, "w_k": w.w_k, "w_v": w.w_v}
    formulas, parts = latent_steps(matrices, w.head, h.rows, h.cols)
    for formula in formulas:
        st.latex(formula)
    for matrix, rows, cols, title, axes in parts:
        show_matrix(matrix, rows, cols, title, axes, f"step_{title[:4]}", show_values=values, stem=h.stem)


def show_qkv(h: Head, values: bool) -> None:
    w, s = h.weights, h.steps
    st.latex(r"Q = X W_Q + b_Q,\quad K = X_{kv} W_K + b_K,\quad V = X_{kv} W_V + b_V" if w.latent is None else
             r"Q,\ K,\ V\ \text{from the latents of step 1}")
    d_head = dimension_names(w.d_head, "h")
    show_matrix(s.q, h.rows, d_head, "Q", ("tokens", "d_head"), "step_q", show_values=values, stem=h.stem)
    show_matrix(s.k, h.cols, d_head, "K", ("key tokens", "d_head"), "step_k", show_values=values, stem=h.stem)
    show_matrix(s.v, h.cols, dimension_names(w.d_value, "h"), "V", ("key tokens", "d_value"), "step_v",
                show_values=values, stem=h.stem)
    if h.trace.facts.positional == "rotary" and h.weights.rotary is None:
        st.caption("This layer rotates neither Q nor K (NoPE): its scores carry no position.")
    if s.rot_q is not None and s.rot_k is not None:
        done: list[str] = []
        if w.q_norm is not None:
            spans = "every head's numbers at once" if w.q_norm.whole is not None else "the head's own d_head numbers"
            st.markdown(f"**Query and key norms**: Q and K are each normalised (an RMSNorm over {spans}, times a "
                        "learned gain) before the scores.")
            st.latex(r"\hat q_p = \frac{q_p}{\sqrt{\mathrm{mean}(q_p^2) + \epsilon}} \odot g_q")
            done.append("its norm")
        if w.rotary is not None:
            r = w.rotary.cos.shape[-1]
            pairs = "(2i, 2i + 1)" if w.rotary.interleaved else f"(i, i + {r // 2})"
            part = f"the {'last' if w.latent else 'first'} {r} of its {w.d_head} dimensions" if r < w.d_head else \
                "its dimensions"
            st.markdown(f"**Rotary positions**: each pair {pairs} of {part} of Q and K is rotated by an angle "
                        "proportional to the token's position, so Q·K depends on the two positions' distance.")
            st.latex(r"\tilde q_p = q_p \cos(p\,\theta) + \mathrm{rotate}(q_p) \sin(p\,\theta)")
            done.append("the rotation")
        if w.l2_eps is not None:
            st.markdown("**qk-norm**: after the rotation, Q and K are each divided by their root mean square.")
            done.append("the norm after it")
        if w.query_scale is not None:
            st.markdown(f"**Temperature tuning**: each query is multiplied by a factor of its position p, from "
                        f"{w.query_scale[0]:.3g} to {w.query_scale[-1]:.3g} here (a: attn_scale, f: floor_scale).")
            st.latex(r"q_p \times \big(1 + a \ln(1 + \lfloor (p + 1) / f \rfloor)\big)")
            done.append("the temperature")
        what = " and ".join(done)
        show_matrix(s.rot_q, h.rows, d_head, f"Q after {what}", ("tokens", "d_head"), "step_rot_q",
                    show_values=values, stem=h.stem)
        show_matrix(s.rot_k, h.cols, d_head, f"K after {what}", ("key tokens", "d_head"), "step_rot_k",
                    show_values=values, stem=h.stem)


def show_scores(h: Head, values: bool) -> None:
    s, w = h.steps, h.weights
    axes = ("query tokens", "key tokens")
    show_matrix(s.qk, h.rows, h.cols, "Q Kᵀ", axes, "step_qk", show_values=values, stem=h.stem)
    bias = None if w.position_bias is None else bias_name(h.trace.facts.positional)
    st.latex(scores_latex(w.scale, w.d_head, w.softcap, bias))
    st.caption(f"Scale: {w.scale_text}.")
    show_matrix(s.scores, h.rows, h.cols, "S, the scaled scores", axes, "step_scores", show_values=values, stem=h.stem)
    score_terms_view(current_runner(), h.trace, h.layer, w.head, h.captured, s.qk * w.scale, (h.rows, h.cols),
                     values, h.stem)
    st.latex(r"S_{\text{masked}} = S + M,\quad M_{ij} = \begin{cases}0 & \text{key } j \text{ visible to } i\\"
             r"-\infty & \text{hidden}\end{cases}")
    show_matrix(s.masked, h.rows, h.cols, "S + M (hatched: −∞)", axes, "step_masked", show_values=values, stem=h.stem)
    st.latex(softmax_latex(w.sink))
    show_matrix(s.pattern, h.rows, h.cols, "A, the attention pattern", axes, "step_pattern", show_values=values,
                stem=h.stem, zrange=(0.0, 1.0), colorscale="Viridis")
    show_row(h)
    why_here(current_trace(), h.site, h.layer, h.weights.head, "step")


def show_row(h: Head) -> None:
    """One query's row through the steps, as numbers."""
    positions = list(range(len(h.rows)))
    keep_valid("step_query", positions)
    query = st.selectbox("Follow one query through the scores", positions, key="step_query",
                         format_func=list(h.rows).__getitem__)
    url_state.write(step_query=query)
    s = h.steps
    st.dataframe(pd.DataFrame({"Q·K": s.qk[query], "scaled": s.scores[query], "+ mask": s.masked[query],
                               "softmax": s.pattern[query]}, index=h.cols).T, key="step_row_table")


def show_output(h: Head, values: bool) -> None:
    s, w = h.steps, h.weights
    st.latex(r"Z = A V \in \mathbb{R}^{\text{tokens} \times d_{\text{head}}}")
    show_matrix(s.z, h.rows, dimension_names(w.d_value, "h"), f"Z, head {w.head}'s output", ("tokens", "d_value"),
                "step_z", show_values=values, stem=h.stem)
    z_all = h.captured("hook_z")  # (heads, q_len, d_head)
    concat_cols = [f"head{i}·h{j}" for i in range(w.n_heads) for j in range(w.d_value)]
    st.latex(r"\mathrm{Concat}(Z_0, \dots, Z_{h-1})\, W_O + b_O")
    show_matrix(concat_heads(z_all), h.rows, concat_cols, "Concat of every head's Z", ("tokens", "heads·d_head"),
                "step_concat", show_values=values, stem=h.stem)
    if (gates := s.gates) is not None:  # Qwen3-Next, Qwen3.5: made beside each head's query
        st.latex(r"G = \sigma(X W_G + b_G):\quad \mathrm{Concat}(Z_0, \dots, Z_{h-1}) \odot G\ \text{goes into}\ W_O")
        show_matrix(gates, h.rows, concat_cols, "G, every head's output gate", ("tokens", "heads·d_head"), "step_gate",
                    show_values=values, stem=h.stem)
    d_model = dimension_names(w.w_o.shape[1])
    show_matrix(w.w_o, concat_cols, d_model, "W_O", ("heads·d_head", "d_model"), "step_w_o", show_values=values,
                stem=h.stem)
    c = h.trace.captured
    if not h.names.projected:
        show_matrix(output_projection(z_all, w, h.x), h.rows, d_model, "Concat(Z) W_O + b_O", ("tokens", "d_model"),
                    "step_projected", show_values=values, stem=h.stem)
        st.caption("This model normalises attention's output before adding it to the stream: what it adds is that "
                   f"norm's output ({h.names.out}).")
    if h.names.out is not None:  # a hook holds it (StepNames.unshown says why not where none does)
        show_matrix(c[h.names.out], h.rows, d_model, "the attention block's output", ("tokens", "d_model"),
                    "step_attn_out", show_values=values, stem=h.stem)
    if h.names.after is None:  # attention and the MLP side by side, or no hook of the sum: said
        st.info(h.names.unshown, icon=":material/info:")
        return
    st.latex(r"x_{\text{after}} = x_{\text{before}} + \mathrm{Attention}(x)")
    show_matrix(c[h.names.after], h.rows, d_model, "the residual sum", ("tokens", "d_model"), "step_resid",
                show_values=values, stem=h.stem)
    if h.normed is None:
        return
    rms = "RMS" in h.trace.facts.norm
    st.latex(r"\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\mathrm{mean}(x^2) + \epsilon}} \odot g" if rms else
             r"\mathrm{LayerNorm}(x) = \frac{x - \mathrm{mean}(x)}{\sqrt{\mathrm{var}(x) + \epsilon}} \odot g + b")
    affine = "hook_normalized × g" if rms else "hook_normalized × g + b"
    show_matrix(h.normed, h.rows, d_model, f"{h.names.norm_label}: {affine}", ("tokens", "d_model"), "step_norm",
                show_values=values, stem=h.stem)


def page() -> None:
    """The page (in a function: no module global holds the trace; see ui/downloads.py)."""
    trace = current_trace()
    st.header("Step through one head")
    st.caption("One head of one layer, computed again here from the model's weights on your tokens: the real numbers "
               "at every step, checked against what the model computed. Hover a cell for its value.")
    site, layer, head = choose_head(trace)
    if not weights_here("Step through"):
        return
    chosen = load_head(trace, site, layer, head)
    if not show_check(chosen):
        return
    if "shared layers" in trace.facts.notes:  # ALBERT: every block's weights are the same tensors
        st.caption(f"Weights: {trace.facts.notes['shared layers']}; the block's input is its own.")
    w = chosen.weights
    if (shared := gqa_text(w.n_heads, w.n_kv_heads, w.head, w.kv_head)) is not None:
        st.info(shared, icon=":material/share:")
    show_values = st.toggle("Write the numbers in the cells (up to 16 × 16)", key="step_show_values")
    url_state.write(step_values=show_values)
    show_open_tab(STEPS, (show_inputs, show_qkv, show_scores, show_output), "step_view", chosen, show_values)


page()
