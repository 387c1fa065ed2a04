"""The view in the URL, so that a copied link reopens it: `?model=…&text=…&site=…&layer=…&head=…`.

A session's first run seeds the widgets' state from `st.query_params`; every run writes the current
choices back. The page itself is the URL's path (`/attention`), set by `st.navigation`; the Attention
page's tab is `view`, bound by `st.tabs` itself.

Texts up to PLAIN_TEXT_UP_TO characters travel as `text` (readable, editable in the address bar);
longer ones as `tz`, zlib-compressed and base64url-encoded, so that a link to a long text keeps working
on any server (no server-side store to lose) at about a third of the length.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import zlib

import streamlit as st

RESTORED = "_url_restored"
OPEN_MODEL_VARIABLE = "ATTENTION_ATLAS_MODEL"  # the model a session opens on when its link names none (a model id
# or a Hugging Face folder: `attention-atlas --model FOLDER` sets it)
TRACE_FILE_VARIABLE = "ATTENTION_ATLAS_TRACE"  # a trace file each new session opens on (`attention-atlas --trace FILE`)
PLAIN_TEXT_UP_TO = 1_000
MAX_TEXT_CHARS = 60_000  # the text box's limit (8,192 tokens of English prose are about 37,000 characters for
# SmolLM2's tokenizer): a longer text from a link is left out, and the person told
PACKED_TEXT_MOST_BYTES = 4 * MAX_TEXT_CHARS  # a link's compressed text is unpacked to at most this (UTF-8: at most 4
# bytes a character); a longer one is left out unread
FLAGS = {"hide_special": "attention_hide_special", "values": "attention_show_values",
         "diagonal": "attention_window_diagonal", "step_values": "step_show_values",
         "activations_norm_log": "activations_norm_log", "present": "tour_present",
         "predict": "tour_predict", "why_open": "why_open"}  # URL name -> key, "1"/"0"
NUMBERS = {"layer": "layer", "head": "head", "row": "attention_window_row", "col": "attention_window_col",
           "masks_window": "masks_window", "masks_pad_to": "masks_pad_to", "step_query": "step_query",
           **{name: name for name in ("positions_length", "positions_d_model", "positions_offset", "positions_pos",
                                      "positions_pair")},
           **{name: name for name in ("activations_layer", "activations_neuron", "activations_topk",
                                      "activations_lens_start", "activations_ssd_layer", "activations_ssd_head")},
           "top_k": "generate_top_k", "seed": "generate_seed", "max_new": "generate_max_new", "step": "tour_step",
           "tour_head": "tour_head", "why_query": "why_query", "why_key": "why_key"}
DECIMALS = {"temperature": "generate_temperature", "top_p": "generate_top_p"}  # finite numbers only
CHOICES = {"decoding": ("generate_method", ("greedy", "sample")),
           "why": ("why_view", ("cell", "row")),
           "draw": ("attention_draw", ("matrix", "sink", "distance"))}  # URL name -> (key, the values allowed)
TEXTS = {"site": "site", "colorscale": "attention_colorscale", "masks_editor": "masks_editor",
         "positions_stack": "positions_stack", "positions_measure": "positions_measure",
         "activations_stack": "activations_stack"}  # checked by the widgets


def _as_int(value: str | None) -> int | None:
    """A whole number written in ASCII digits, as a link writes one ("12"), else None (no "²", "١٢", "-1" or a
    number of more than 18 digits, which no choice is and int() may refuse)."""
    return int(value) if value is not None and value.isascii() and value.isdecimal() and len(value) <= 18 else None


def _as_decimal(value: str | None) -> float | None:
    """A finite number written plainly ("0.7", "-1"), else None (no "nan", "inf" or "1e999")."""
    try:
        number = float(value) if value is not None and len(value) <= 20 else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


class PackedTextTooLong(Exception):
    """A link's compressed text unpacks to more than PACKED_TEXT_MOST_BYTES."""


def pack_text(text: str) -> dict[str, str | None]:
    """The URL parameters for a text: plain when short, compressed when long (the other one removed)."""
    if len(text) <= PLAIN_TEXT_UP_TO:
        return {"text": text, "tz": None}
    packed = base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8", "surrogatepass"), 9)).decode()
    return {"text": None, "tz": packed}


def unpack_text(params: dict[str, str]) -> str | None:
    """The text of a link, or None when it has none (or a compressed one that does not decode). A compressed text
    is unpacked to at most PACKED_TEXT_MOST_BYTES, PackedTextTooLong beyond (a link of a few kilobytes could
    otherwise unpack to gigabytes)."""
    if "tz" in params:
        try:
            unpacking = zlib.decompressobj()
            data = unpacking.decompress(base64.urlsafe_b64decode(params["tz"].encode()), PACKED_TEXT_MOST_BYTES + 1)
            if len(data) > PACKED_TEXT_MOST_BYTES:
                raise PackedTextTooLong
            return (data + unpacking.flush()).decode("utf-8", "surrogatepass")
        except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
            return None
    return params.get("text")


def restore_once(model_ids: list[str], custom_choice: str, causal_labels: dict[str, str]) -> None:
    """On a session's first run, put the URL's choices into the widgets' state (the widgets check
    ranges against the model; a bad value falls back to the first choice).

    causal_labels: the causal picker's label for each URL value ("auto" -> "as trained")."""
    if st.session_state.get(RESTORED):
        return
    params = st.query_params.to_dict()
    model = params.get("model", "").strip() or os.environ.get(OPEN_MODEL_VARIABLE, "").strip()
    if model:
        known = model in model_ids
        st.session_state["model_id"] = model if known else custom_choice
        if not known:
            st.session_state["custom_model"] = model
    try:
        text = unpack_text(params)
    except PackedTextTooLong:
        text = None
        st.session_state["text_note"] = f"The link's text unpacks to more than {PACKED_TEXT_MOST_BYTES:,} bytes; " \
                                        f"the text box holds at most {MAX_TEXT_CHARS:,} characters, so it was left out."
    if text is not None and len(text) > MAX_TEXT_CHARS:
        st.session_state["text_note"] = f"The link's text has {len(text):,} characters; the text box holds at most " \
                                        f"{MAX_TEXT_CHARS:,}, so it was left out."
    elif text is not None:
        st.session_state["text"] = text
    if "target" in params:
        st.session_state["decoder_mode"] = "given target"
        st.session_state["target"] = params["target"]
    if params.get("causal") in causal_labels:
        st.session_state["causal"] = causal_labels[params["causal"]]
    for name, key in TEXTS.items():
        if name in params:
            st.session_state[key] = params[name]
    for name, key in NUMBERS.items():
        if _as_int(params.get(name)) is not None:
            st.session_state[key] = _as_int(params[name])
    for name, key in DECIMALS.items():
        if _as_decimal(params.get(name)) is not None:
            st.session_state[key] = _as_decimal(params[name])
    for name, (key, allowed) in CHOICES.items():
        if params.get(name) in allowed:
            st.session_state[key] = params[name]
    for name, key in FLAGS.items():
        if params.get(name) in ("0", "1"):
            st.session_state[key] = params[name] == "1"
    st.session_state[RESTORED] = True  # last: a run stopped half-way by a rerun restores the link again


def write(**values: str | int | bool | None) -> None:
    """Set these URL parameters (None removes one; True/False are written 1/0); unchanged ones are left alone."""
    params = st.query_params
    for name, value in values.items():
        text = None if value is None else str(int(value)) if isinstance(value, bool) else str(value)
        if text is None:
            params.pop(name, None)
        elif params.get(name) != text:
            params[name] = text
