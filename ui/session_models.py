"""Models trained or uploaded in this session: listed in the sidebar for this session only and opened on every page
like the others. Each is a fixed copy (never trained further); its id carries a random part, so that the shared
trace cache never mixes two sessions' models."""

from __future__ import annotations

import secrets

import streamlit as st

from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.model.toy.store import ToyModel

SESSION_MODELS = "session_models"  # session key: {model id: ToyRunner}, oldest first
MAX_SESSION_MODELS = 4  # a session's own models kept at once; the oldest goes first
SESSION_PREFIX = "trained-"


def session_models() -> dict[str, ToyRunner]:
    return st.session_state.setdefault(SESSION_MODELS, {})


def add_session_model(name: str, toy: ToyModel) -> str:
    """List `toy` under a new id ("trained-<name>-<random>") and return the id; beyond MAX_SESSION_MODELS the oldest
    goes, unless the sidebar shows it (then the next oldest)."""
    models = session_models()
    model_id = f"{SESSION_PREFIX}{name}-{secrets.token_hex(3)}"
    models[model_id] = ToyRunner(model_id, toy)
    shown = st.session_state.get("model_id")
    while len(models) > MAX_SESSION_MODELS:
        models.pop(next(m for m in models if m != shown))
    return model_id


def still_listed(state_key: str) -> dict:
    """The session's map under `state_key` of (what a model was made from -> its model id), keeping only the models
    still listed (a newer one may have pushed one out): what a page looks up before making a model again."""
    listed = session_models()
    kept = {made_from: model for made_from, model in st.session_state.get(state_key, {}).items() if model in listed}
    st.session_state[state_key] = kept
    return kept


def session_runner(model_id: str) -> ToyRunner | None:
    """This session's model of that id, if it has one."""
    return st.session_state.get(SESSION_MODELS, {}).get(model_id)


def open_model(model_id: str) -> None:
    """A button's callback: make `model_id` the sidebar's model, reading the first example of its task (widget
    values may change only before the widgets are drawn: in a callback)."""
    st.session_state["model_id"] = model_id
    st.session_state["text"] = session_models()[model_id].examples[0]
