"""The view in the URL, so that a copied link reopens it: `?model=…&text=…&site=…&layer=…&head=…`.

A session's first run seeds the widgets' state from `st.query_params`; every run writes the
current choices back. The page itself is the URL's path (`/attention`), set by `st.navigation`.
"""

from __future__ import annotations

import streamlit as st

RESTORED = "_url_restored"
HEAD_PICKERS = ("overview", "attention")  # the pages whose site/layer/head pickers the URL sets


def _as_int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def restore_once(model_ids: list[str], custom_choice: str, causal_labels: dict[str, str]) -> None:
    """On a session's first run, put the URL's choices into the widgets' state (the widgets check
    ranges against the model; a bad value falls back to the first choice).

    causal_labels: the causal picker's label for each URL value ("auto" -> "as trained")."""
    if st.session_state.get(RESTORED):
        return
    st.session_state[RESTORED] = True
    params = st.query_params
    model = params.get("model", "").strip()
    if model:
        known = model in model_ids
        st.session_state["model_id"] = model if known else custom_choice
        if not known:
            st.session_state["custom_model"] = model
        if "text" in params:
            st.session_state[f"text_{model}"] = params["text"]
        if "target" in params:
            st.session_state["decoder_mode"] = "given target"
            st.session_state[f"target_{model}"] = params["target"]
    if params.get("causal") in causal_labels:
        st.session_state["causal"] = causal_labels[params["causal"]]
    layer, head = _as_int(params.get("layer")), _as_int(params.get("head"))
    for page in HEAD_PICKERS:
        if "site" in params:
            st.session_state[f"{page}_site"] = params["site"]
        if layer is not None:
            st.session_state[f"{page}_layer"] = layer
        if head is not None:
            st.session_state[f"{page}_head"] = head


def write(**values: str | int | None) -> None:
    """Set these URL parameters (None removes one); unchanged ones are left alone."""
    params = st.query_params
    for name, value in values.items():
        if value is None:
            params.pop(name, None)
        elif params.get(name) != str(value):
            params[name] = str(value)
